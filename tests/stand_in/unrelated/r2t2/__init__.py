"""Stand-in for the unrelated PyPI package ``r2t2`` 0.3.1 (a research-references tracking tool, tests only).

It owns the import name ``r2t2`` but has no ``R2T2ASRModel``: ``from r2t2 import R2T2ASRModel`` raises
ImportError ("cannot import name"), not ModuleNotFoundError.
"""

__version__ = "0.3.1"


def add_source(*args, **kwargs):  # the real one records bibliography references
    return None
