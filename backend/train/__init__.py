"""`fleetdeck train` and `fleetdeck bench`: a LoRA trainer and its step-time probe.

Importing this package (or `runconfig` and `rundir`) loads no torch; the modules that train
(`models`, `attention`, `lora`, `loop`, `bench`) import it themselves. Entry points:
`fleetdeck.backend.train.main.train_main(argv)` and `fleetdeck.backend.train.bench.bench_main(argv)`.
"""
