"""The programs behind scripts/: one function per program, taking Hydra's DictConfig.

Imports go one way: scripts -> commands -> training / decoding / head analysis -> model.
`entry` makes a command of a function of the config, `exits` turns every failure into one line
and an exit code, `paths` checks the files a command reads and writes.
"""
