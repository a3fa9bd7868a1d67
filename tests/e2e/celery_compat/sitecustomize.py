"""Put back ``celery.backends.database.retry`` for the Celery deployment test's processes.

celery 5.7 removed that decorator (its database backend now retries on its own), but
apache-airflow-providers-celery 3.26 still imports it, so with the locked versions neither
``airflow celery worker`` nor a scheduler with the CeleryExecutor can start. The test puts
this folder first on PYTHONPATH of the Airflow processes only. Remove it once the lock has
a provider release that no longer imports ``retry`` (or pins celery below 5.7).
"""

try:
    import celery.backends.database as _database
except ImportError:  # celery is not installed in this interpreter: nothing to mend
    _database = None

if _database is not None and not hasattr(_database, "retry"):

    def retry(fun):
        # The backend already retries its own session errors in celery >= 5.7.
        return fun

    _database.retry = retry
