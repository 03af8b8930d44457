"""Build the optional C accelerators (the format layer's hot loops; the run layer's settled-partition scan); without
a compiler their Python twins are used instead."""

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
        Extension(
            "migrate.run._settled",
            ["migrate/run/_settled.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ]
)
