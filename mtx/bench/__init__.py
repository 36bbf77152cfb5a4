"""Benchmarks of mtx against gluonnlp 0.10 and the d2l book: `python -m mtx.bench --help`.

    __main__   the command line: all | train | decode | profile | translate | compare-runs
    workers    the measurements (each in a process of its own) and their named constants
    impls      each implementation as a training step and a greedy decoder;
               `mtx_training_step` is the one place mtx's training step is built
    peers      the gluonnlp and d2l models
    inputs     model/data configs from conf/, corpus, training and decoding batches
    flops      model FLOPs of a training step, from the ModelConfig used
    machine    CPU, flags, MXNet, threads, native kernels; matrix-multiply peaks
    tables     markdown tables of the reports
"""
