# Everything a fresh Debian machine needs, installed by the targets themselves (run as root).
VENV        := .venv
PYTHON      ?= python3
APT_PACKAGES := kcat mariadb-server postgresql zookeeper openjdk-17-jre-headless maven chromium chromium-driver debootstrap iproute2 nftables
SPARK_JARS  := .cache/spark-jars
REFERENCE_JARS := .cache/reference-jars
JDBC_SINK_PLUGIN := $(REFERENCE_JARS)/plugins/debezium-connector-jdbc
APICURIO_JARS := $(REFERENCE_JARS)/apicurio
APICURIO3_JARS := $(REFERENCE_JARS)/apicurio3
# what the reference's classpath already holds, left out of Apicurio's copies (bench/reference/apicurio/pom.xml)
APICURIO_EXCLUDED := -DexcludeGroupIds=org.apache.kafka,com.fasterxml.jackson.core,com.fasterxml.jackson.dataformat,com.fasterxml.jackson.datatype,org.slf4j,org.lz4,org.xerial.snappy,com.github.luben,org.yaml \
	-DexcludeArtifactIds=commons-lang3
MYSQL_ROOT  := .cache/mysql-root
WHEELHOUSE  := .cache/wheelhouse
DOCKER_PACKAGES := docker.io docker-compose debootstrap
PYTEST_ARGS ?=
# Two pytest workers: with three the Spark and JVM tests only ran slower on the two cores (the e2e sink
# test 235 s instead of 70) and the whole suite took no less time.
TEST_WORKERS ?= 2
DEMO_ARGS   ?=
# MYSQL=1 (any value): the compose demo from Oracle MySQL (docker-compose.mysql.yml over docker-compose.yml)
MYSQL       ?=
COMPOSE_FILES := -f docker-compose.yml $(if $(MYSQL),-f docker-compose.mysql.yml)

.PHONY: setup bytecode system-deps spark-jars reference mysql-root test test-all demo bench clean compose-demo compose-image \
        compose-mysql-root docker-engine docker-base wheelhouse canal-proto canal-python canal-java-client

setup: system-deps $(VENV)/.installed spark-jars reference mysql-root canal-python canal-java-client

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

# The tree's modules compiled once, here: every broker, connector, worker and CLI process a test or the
# demo starts imports them, and where PYTHONDONTWRITEBYTECODE is set (as in this machine's environment) each of those
# processes would otherwise compile them all again (0.4 s of CPU a start).
bytecode:
	$(VENV)/bin/python -m compileall -q -j 0 common sandbox logcore cdc connect canal registry streams spark_sink binlake testkit bench tests

# The Spark sink's JVM jars (Kafka source, Delta, PostgreSQL driver) from Maven Central, into the
# cache spark_sink/session.py reads (BINLAKE_SPARK_JARS overrides it); pinned in spark_sink/jars/pom.xml.
spark-jars: $(SPARK_JARS)/.fetched

$(SPARK_JARS)/.fetched: spark_sink/jars/pom.xml
	mvn -q -B -f spark_sink/jars/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(SPARK_JARS)
	touch $@

# Apache Kafka (broker, Java client and tools), Kafka Connect and Debezium's MySQL connector, the
# reference implementations tests/reference and bench/versus.py hold binlake against (testkit/reference.py).
reference: $(REFERENCE_JARS)/.fetched $(JDBC_SINK_PLUGIN)/.fetched $(APICURIO_JARS)/.fetched $(APICURIO3_JARS)/.fetched

$(REFERENCE_JARS)/.fetched: bench/reference/pom.xml
	mvn -q -B -f bench/reference/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(REFERENCE_JARS)
	touch $@

# Debezium's JDBC sink connector (bench/sink.py), in a Kafka Connect plugin directory of its own.
$(JDBC_SINK_PLUGIN)/.fetched: bench/reference/jdbc-sink/pom.xml
	mvn -q -B -f bench/reference/jdbc-sink/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(JDBC_SINK_PLUGIN) \
		-DexcludeGroupIds=com.fasterxml.jackson.core,com.fasterxml.jackson.datatype
	touch $@

# Apicurio Registry's serdes and Connect converter, 2.x and 3.x (tests/reference/test_apicurio*.py), each on the
# classpath after the jars above.
$(APICURIO_JARS)/.fetched: bench/reference/apicurio/pom.xml
	mvn -q -B -f bench/reference/apicurio/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(APICURIO_JARS) \
		$(APICURIO_EXCLUDED)
	touch $@

$(APICURIO3_JARS)/.fetched: bench/reference/apicurio/v3/pom.xml
	mvn -q -B -f bench/reference/apicurio/v3/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(APICURIO3_JARS) \
		$(APICURIO_EXCLUDED)
	touch $@

# Canal's client for Python, the tests' Canal client (tests/e2e/test_canal_tcp.py). Beside the venv, not in it:
# its top-level package is `canal`, as binlake's own is; its protobuf modules need the pure-Python runtime.
CANAL_PYTHON := .cache/canal-python

canal-python: $(CANAL_PYTHON)/.installed

$(CANAL_PYTHON)/.installed: | $(VENV)/.installed
	$(VENV)/bin/pip install -q --no-deps --target $(CANAL_PYTHON) canal-python==0.4
	touch $@

# Canal's Java client (canal.client) and its jars from Maven Central, for tests/canal_clients/java/CanalLoop.java.
CANAL_CLIENT_JARS := .cache/canal-client-jars

canal-java-client: $(CANAL_CLIENT_JARS)/.fetched

$(CANAL_CLIENT_JARS)/.fetched: tests/canal_clients/java/pom.xml
	mvn -q -B -f tests/canal_clients/java/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(CANAL_CLIENT_JARS)
	touch $@

# Canal's .proto files (written from its field numbers) compiled into the modules binlake imports.
canal-proto:
	cd cdc/formats/proto && ../../../$(VENV)/bin/python -m grpc_tools.protoc -I. --python_out=. EntryProtocol.proto \
		CanalProtocol.proto

# Oracle MySQL, which Debian 12 lacks: a minimal Debian sid root with sid's mysql-server (9.x), from
# Debian's archive (its Release file may be past Valid-Until). sandbox.sql runs mysqld from it.
mysql-root: $(MYSQL_ROOT)/.built

$(MYSQL_ROOT)/.built:
	rm -rf $(MYSQL_ROOT).tmp
	debootstrap --variant=minbase sid $(MYSQL_ROOT).tmp >/dev/null
	chroot $(MYSQL_ROOT).tmp sh -c 'apt-get -qq -o Acquire::Check-Valid-Until=false update && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mysql-server >/dev/null && apt-get clean'
	rm -rf $(MYSQL_ROOT) && mv $(MYSQL_ROOT).tmp $(MYSQL_ROOT)
	touch $@

test: setup bytecode
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

test-all: setup bytecode
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist worksteal -m '' $(PYTEST_ARGS)

# MariaDB (mariadb-server) → mysql connector → brokers → processors and the Spark sink, on this machine;
# e.g. DEMO_ARGS='--format canal --keep', DEMO_ARGS=--mysql (Oracle MySQL from the mysql-root)
demo: setup bytecode
	$(VENV)/bin/binlake demo $(DEMO_ARGS)

# The same pipeline in containers (docker-compose.yml), built here and checked end to end; it stays up.
# MYSQL=1: from Oracle MySQL instead of MariaDB.
compose-demo: compose-image
	docker-compose $(COMPOSE_FILES) up -d
	$(VENV)/bin/python docker/check.py $(COMPOSE_FILES)

compose-image: setup docker-base wheelhouse $(if $(MYSQL),compose-mysql-root)
	docker-compose $(COMPOSE_FILES) build

# The MySQL root (mysql-root) as the image binlake-mysql-root:dev, docker/mysql.Dockerfile's base;
# imported again when the root was rebuilt since (.cache/mysql-root.image holds the image's id).
compose-mysql-root: docker-engine mysql-root
	@[ .cache/mysql-root.image -nt $(MYSQL_ROOT)/.built ] && [ "$$(cat .cache/mysql-root.image)" = \
	  "$$(docker image inspect -f '{{.Id}}' binlake-mysql-root:dev 2>/dev/null)" ] || { \
	  echo "importing $(MYSQL_ROOT) as binlake-mysql-root:dev"; \
	  tar -C $(MYSQL_ROOT) -c . | docker import - binlake-mysql-root:dev > .cache/mysql-root.image.tmp \
	  && mv .cache/mysql-root.image.tmp .cache/mysql-root.image; }

# A Docker engine: Debian's docker.io and docker-compose (Compose 1.29), dockerd started if none runs.
docker-engine:
	@missing=""; for p in $(DOCKER_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@docker info >/dev/null 2>&1 || { (nohup dockerd >/var/log/dockerd.log 2>&1 &); \
	  for i in $$(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done; docker info >/dev/null; }

# debian:bookworm for the Dockerfile: pulled where a registry answers, else made with debootstrap.
docker-base: docker-engine
	@docker image inspect debian:bookworm >/dev/null 2>&1 || docker pull debian:bookworm 2>/dev/null || { \
	  rm -rf .cache/debootstrap && debootstrap --variant=minbase bookworm .cache/debootstrap \
	  && tar -C .cache/debootstrap -c . | docker import - debian:bookworm && rm -rf .cache/debootstrap; }

# The Python packages the image installs (pip inside a container cannot reach the index here).
wheelhouse: $(WHEELHOUSE)/.built

$(WHEELHOUSE)/.built: pyproject.toml
	$(VENV)/bin/pip wheel -q -w $(WHEELHOUSE) setuptools wheel '.[sink,streams]'
	rm -f $(WHEELHOUSE)/binlake-*.whl
	touch $@

bench: setup
	$(VENV)/bin/python bench/produce_consume.py

clean:
	rm -rf $(VENV) build *.egg-info .cache
