"""Package layout: the library lives in libs/crawlstream, each service's wiring in
services/<name>/; both install as one `crawlstream` package (services as
`crawlstream.services.<name>`), so the design card's folders stay top-level."""

from setuptools import find_packages, setup

# schemas/history/ holds only .avsc files, but its name is importable: setuptools warns at every
# build unless it is a package of its own (a data-only dir named like a module must be listed here).
_service_packages = ["crawlstream.services", "crawlstream.schemas", "crawlstream.schemas.history"] + [
    f"crawlstream.services.{name}" for name in find_packages("services")
]

setup(
    packages=find_packages("libs") + _service_packages,
    # schemas/ is the published contract (Avro + test vectors); it ships inside the
    # package as crawlstream.schemas so an installed service finds it without the repo.
    package_dir={"": "libs", "crawlstream.services": "services", "crawlstream.schemas": "schemas"},
    package_data={
        "crawlstream": ["py.typed"],
        "crawlstream.schemas": ["*.avsc", "*.json", "test-vectors/*.json"],
        "crawlstream.schemas.history": ["*.avsc"],
    },
)
