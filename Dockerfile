# One image for every service: `crawlstream service <name>` picks the role.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends gcc make libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY requirements.lock pyproject.toml setup.py README.md ./
RUN pip install --no-cache-dir -r requirements.lock
COPY libs libs
COPY services services
COPY schemas schemas
RUN pip install --no-cache-dir --no-deps .
# Non-root (uid 10001, as deploy/k8s's securityContext says): /data is created owned by it, so
# a fresh named volume (docker-compose) starts writable; Kubernetes volumes get fsGroup 10001.
RUN groupadd --gid 10001 crawlstream \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin crawlstream \
    && mkdir -p /data && chown 10001:10001 /data
ENV CRAWLSTREAM_DATA_DIR=/data
VOLUME /data
USER 10001:10001
ENTRYPOINT ["crawlstream"]
