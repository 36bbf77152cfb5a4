"""Benchmarks of mtx against gluonnlp 0.10, the d2l book and CTranslate2 (`mtx-bench --help`): a
thin layer that times the product's own training step, translation and service.

    __main__  the command line             measure  one implementation: training, decoding
    rounds    children (IMPL@REV: at another git revision), interleaved rounds, paired ratios
    inputs    configs, batches, test text  peers    the gluonnlp and d2l models
    flops     model FLOPs (MFU)            tables   markdown tables
    serve     mtx-serve under load
"""
