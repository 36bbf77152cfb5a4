"""Benchmarks of mtx against gluonnlp 0.10 and the d2l book (`mtx-bench --help`): a thin layer
that times the product's own training step, search, translation and service.

    __main__   the command line        rounds     children, interleaved rounds, paired ratios
    measure    training; the reports   decoding   decoding and a trained run's translation
    inputs     configs, batches, text  peers      the gluonnlp and d2l models
    flops      model FLOPs (MFU)       tables     markdown tables
    serve      mtx-serve under load    revisions  other git revisions (--impl mtx@REV)
"""
