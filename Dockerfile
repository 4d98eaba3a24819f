# One image for every piece of the compose demo (docker-compose.yml): the `binlake` command with the
# Spark sink and the stream processors, and Debian's MariaDB, PostgreSQL and ZooKeeper. Built from
# `debian:bookworm` (`make docker-base` makes it with debootstrap where no registry can be reached);
# Python packages come from the host's wheelhouse and the Spark jars from its cache (`make wheelhouse
# spark-jars`): nothing is fetched from the Python index inside the build.
FROM debian:bookworm

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y -q --no-install-recommends python3 python3-venv openjdk-17-jre-headless \
      mariadb-server mariadb-client postgresql zookeeper procps ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home-dir /var/lib/binlake --create-home binlake \
 && mkdir -p /var/lib/binlake/mysql /var/lib/binlake/postgres /var/lib/binlake/zookeeper /var/lib/binlake/data \
      /var/lib/binlake/warehouse /run/mysqld \
 && chown mysql:mysql /var/lib/binlake/mysql /run/mysqld \
 && chown postgres:postgres /var/lib/binlake/postgres \
 && chown zookeeper:zookeeper /var/lib/binlake/zookeeper \
 && chown binlake:binlake /var/lib/binlake/data /var/lib/binlake/warehouse

ENV VIRTUAL_ENV=/opt/binlake/venv PATH=/opt/binlake/venv/bin:$PATH PYTHONUNBUFFERED=1 \
    BINLAKE_SPARK_JARS=/opt/binlake/spark-jars
# The dependencies (a layer of their own: the project's code changes more often)
COPY .cache/wheelhouse /tmp/wheelhouse
RUN python3 -m venv $VIRTUAL_ENV \
 && pip install -q --no-index --find-links /tmp/wheelhouse /tmp/wheelhouse/*.whl \
 && rm -rf /tmp/wheelhouse
COPY .cache/spark-jars /opt/binlake/spark-jars
WORKDIR /opt/binlake
COPY . /opt/binlake/src
RUN pip install -q --no-index --no-deps --no-build-isolation /opt/binlake/src \
 && cp -r /opt/binlake/src/examples /opt/binlake/src/docker /opt/binlake/ && rm -rf /opt/binlake/src
ENTRYPOINT []
CMD ["binlake", "--help"]
