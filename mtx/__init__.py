"""mtx: a sequence-to-sequence Transformer for machine translation on MXNet Gluon, built around
the d2l book's multi-head attention block. README.md has the layout of the package."""
