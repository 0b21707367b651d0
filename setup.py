"""Package layout: the library lives in libs/crawlstream, each service's wiring in
services/<name>/; both install as one `crawlstream` package (services as
`crawlstream.services.<name>`), so the design card's folders stay top-level."""

from setuptools import find_packages, setup

_service_packages = ["crawlstream.services", "crawlstream.schemas"] + [
    f"crawlstream.services.{name}" for name in find_packages("services")
]

setup(
    packages=find_packages("libs") + _service_packages,
    # schemas/ is the published contract (Avro + test vectors); it ships inside the
    # package as crawlstream.schemas so an installed service finds it without the repo.
    package_dir={"": "libs", "crawlstream.services": "services", "crawlstream.schemas": "schemas"},
    package_data={
        # the scheduler's Lua scripts, read with importlib.resources (crawlstream.politeness._lua)
        "crawlstream": ["py.typed", "politeness/lua/*.lua"],
        "crawlstream.schemas": ["*.avsc", "*.json", "history/*.avsc", "test-vectors/*.json"],
    },
)
