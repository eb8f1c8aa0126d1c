pytest_plugins = ["cuflow.bench.fixtures"]  # the fixtures live in the package: cuflow/bench/fixtures.py
