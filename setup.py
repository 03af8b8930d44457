"""Build the optional C accelerator (the format layer's hot loops); without a compiler its Python twin is used
instead."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "migrate.format._speedups",
            ["migrate/format/_speedups.c"],
            depends=["migrate/format/_speedups_base.h"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
