"""Spark tests: the broker data source and run_group on a local SparkSession."""
