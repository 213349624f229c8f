"""The package's version, in a module of its own: the disk cache keys its entries by it, and
importing it from ``resolver`` would make every such module import the package's ``__init__``."""

__version__ = "0.1.0"
