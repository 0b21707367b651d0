# Two commands on a fresh Debian machine with Python 3.11: `make run` and `make test`.
# Each one creates .venv from the pinned requirements.lock the first time it runs.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA_DIR ?= ./data

.PHONY: run test test-slow bench lint venv kafka schema-registry clean help

help:
	@echo "make run | test | test-slow | bench | lint | kafka | schema-registry | clean"

$(STAMP): requirements.lock pyproject.toml setup.py
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.11 (or set PYTHON=...)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { \
	  echo "venv module missing; trying virtualenv"; \
	  $(PYTHON) -m pip install --user -q virtualenv && $(PYTHON) -m virtualenv $(VENV); }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

# A real Apache Kafka broker for tests, benchmarks and `crawlstream local-kafka`: Maven
# resolves the version pinned in deploy/kafka/pom.xml with its runtime dependencies into
# the git-ignored .cache/kafka/libs (nothing is downloaded at run time, no jar committed).
KAFKA_LIBS  := .cache/kafka/libs
KAFKA_STAMP := $(KAFKA_LIBS)/.installed
$(KAFKA_STAMP): deploy/kafka/pom.xml
	@command -v java >/dev/null || { echo "java not found: Kafka needs Java 17+ (apt-get install openjdk-17-jre-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "mvn not found: apt-get install maven"; exit 1; }
	rm -rf $(KAFKA_LIBS)
	mvn -q -B -f deploy/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA_LIBS)
	@touch $(KAFKA_STAMP)

kafka: $(KAFKA_STAMP)

# A real Confluent-compatible Schema Registry for tests (Apicurio Registry, its ccompat API):
# Maven fetches the ready-built Quarkus app pinned in deploy/schema-registry/pom.xml (one
# 158 MB tar.gz, ~9 s cold) and tar unpacks it into the git-ignored .cache/schema-registry/app
# (tar, not Maven's unpack, which truncates the archive's long pax file names). Running it
# needs Java 21+; see docs/decisions/013-schema-registry.md.
SCHEMA_REGISTRY_DIR   := .cache/schema-registry
SCHEMA_REGISTRY_STAMP := $(SCHEMA_REGISTRY_DIR)/app/.installed
$(SCHEMA_REGISTRY_STAMP): deploy/schema-registry/pom.xml
	@command -v mvn >/dev/null || { echo "mvn not found: apt-get install maven"; exit 1; }
	rm -rf $(SCHEMA_REGISTRY_DIR)
	mvn -q -B -f deploy/schema-registry/pom.xml dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(SCHEMA_REGISTRY_DIR)/download
	mkdir -p $(SCHEMA_REGISTRY_DIR)/app
	tar xzf $(SCHEMA_REGISTRY_DIR)/download/apicurio-registry-app-*-all.tar.gz -C $(SCHEMA_REGISTRY_DIR)/app
	rm -rf $(SCHEMA_REGISTRY_DIR)/download
	@touch $(SCHEMA_REGISTRY_STAMP)

schema-registry: $(SCHEMA_REGISTRY_STAMP)

# The main job: crawl the embedded synthetic web, build the index, print where to query it.
run: $(STAMP)
	$(BIN)/crawlstream demo --data-dir $(DATA_DIR)

test: $(STAMP) $(KAFKA_STAMP) $(SCHEMA_REGISTRY_STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -p no:cacheprovider

test-slow: $(STAMP) $(KAFKA_STAMP)
	$(BIN)/python -m pytest -q -m slow -p no:cacheprovider

bench: $(STAMP) $(KAFKA_STAMP)
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check libs services tests bench examples
	$(BIN)/mypy libs services

clean:
	rm -rf $(VENV) build *.egg-info
