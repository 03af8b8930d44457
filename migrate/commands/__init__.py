"""The verbs of the command line, one module per verb or group of verbs.

Each module has ``register(subparsers)``, which adds its parser(s) and sets ``handler`` (``argparse.Namespace ->
int``, the exit code); ``migrate.cli.COMMANDS`` lists the modules. A handler reports bad input or a refusal by
raising ``migrate.errors.MigrateError``, which the CLI prints without a traceback and turns into exit code 1.
"""
