"""cdclake: the library behind the batch CDC lakehouse pipeline (land, normalize, silver, gates).

Plain Python and PySpark; the Airflow DAGs in ``dags/`` and the Spark entry points in ``jobs/``
are thin layers over it.
"""
__version__ = "0.1.0"
