"""The programs behind scripts/: one function per program, taking Hydra's DictConfig.

Imports go one way: scripts -> commands -> training / decoding / head analysis -> model.
`common` turns every failure into one line and an exit code (see its docstring).
"""
