"""One module per group of verbs, each with ``register(subparsers)`` that adds its parsers and sets ``handler``."""
