# Sourced by the scripts: where the project's Python virtual environments are (made by
# scripts/install-deps.sh test), and the Python the test servers and clients run with.
#   WEIR_TEST_VENV          pinned versions: the test clients, moto (S3), noida-db (Kafka),
#                           confluent-kafka with Avro (the schema-registry tests), cryptography
#                           (test certificates),
#                           kubernetes-validate (deploy/kubernetes)
#   WEIR_TEST_VENV_LATEST   the clients' current releases
#   WEIR_TEST_PYTHON        the pinned environment's python
export WEIR_TEST_VENV="${WEIR_TEST_VENV:-/var/tmp/weir-test-venv}"
export WEIR_TEST_VENV_LATEST="${WEIR_TEST_VENV_LATEST:-/var/tmp/weir-test-venv-latest}"
export WEIR_TEST_PYTHON="${WEIR_TEST_PYTHON:-$WEIR_TEST_VENV/bin/python}"
# What the server scripts run: that python, or the machine's when install-deps.sh has not run.
test_python=$WEIR_TEST_PYTHON
[ -x "$test_python" ] || test_python=python3
