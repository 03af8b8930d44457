"""Build the optional C accelerator of the format layer; without a compiler the numpy path is used instead."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "migrate.format._speedups",
            ["migrate/format/_speedups.c"],
            depends=["migrate/format/_speedups_base.h"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
