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
ENV CRAWLSTREAM_DATA_DIR=/data
VOLUME /data
ENTRYPOINT ["crawlstream"]
