# The binlake image: the `binlake` command with every subcommand (broker, connect, topics, consume, ...),
# and examples/ for the connector configs. Built by docker-compose.yml; untested here (no Docker engine
# on the machine it was written on).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/binlake
COPY . .
# every dependency ships wheels for linux amd64/arm64, so no compiler is needed
RUN pip install . \
 && useradd --system --home-dir /var/lib/binlake --create-home binlake
USER binlake
ENTRYPOINT ["binlake"]
CMD ["--help"]
