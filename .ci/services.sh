#!/usr/bin/env bash
# Start (if stopped) and prepare the local PostgreSQL and Redis that the deployment tests use.
# A service that is not installed is left out (its tests skip, see tests/deployment_services.py).
set -uo pipefail

if command -v pg_ctlcluster >/dev/null && ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
if command -v redis-server >/dev/null && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi

# The Distribution registry server (docker-registry) of the image copy tests, the demo and
# the image benchmark, which start their own instances on free loopback ports; skopeo is the
# benchmark's reference copier. Installed when missing (root, as on CI).
install_image_registry_tools() {
  local missing=()
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v skopeo >/dev/null || missing+=(skopeo)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" || true
  fi
}
install_image_registry_tools
# Headless Chromium and its WebDriver for the browser tests of the local workspace's pages
# (tests/local_workspace/test_pages_browser.py). Installed from Debian when missing and this
# runs as root with apt-get; otherwise those tests skip (fail under CI=true).
install_browser() {
  command -v chromium >/dev/null && command -v chromedriver >/dev/null && return 0
  command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] || return 0
  apt-get -o DPkg::Lock::Timeout=600 update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    chromium chromium-driver fonts-dejavu-core >/dev/null || true
}
install_browser

# Databases of tests/e2e (each test empties its schema first): airo_airflow (LocalExecutor
# metadata), airo_airflow_celery (CeleryExecutor metadata and Celery results), airo_dagster
# (Dagster storage), airo_dagster_run_retries (the run retries test's), airo_airflow_ha (two
# schedulers, triggerers and Celery workers; also benchmark P13's); tests/reliability:
# airo_airflow_reliability (the deployment whose daemons the campaigns kill);
# airo_airflow_resume_lines (a triggerer SIGKILLed under a task showing live lines). The
# Celery test uses Redis database 5 as its broker and flushes it.
psql_admin() { psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
for db in airo_airflow airo_airflow_celery airo_airflow_ha airo_dagster airo_dagster_run_retries airo_airflow_reliability airo_airflow_resume_lines; do
  if ! psql_admin -c "SELECT 1 FROM pg_database WHERE datname='${db}'" | grep -q 1; then
    psql_admin -c "CREATE DATABASE ${db}" || true
  fi
done
pg_isready -h 127.0.0.1 -p 5432 && redis-cli -h 127.0.0.1 -p 6379 ping
