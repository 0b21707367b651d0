"""Package layout: the library lives in libs/crawlstream, each service's README and entry point in
services/<name>/; both install as one `crawlstream` package (services as
`crawlstream.services.<name>`), so the design card's folders stay top-level."""

from setuptools import find_packages, setup

# schemas/history/ and politeness/lua/ hold only data files, but their names are importable:
# setuptools warns at every build unless each is a package of its own (listed here, as
# find_packages only finds directories with an __init__.py).
_data_packages = ["crawlstream.schemas.history", "crawlstream.politeness.lua"]
_service_packages = ["crawlstream.services", "crawlstream.schemas", *_data_packages] + [
    f"crawlstream.services.{name}" for name in find_packages("services")
]

setup(
    packages=find_packages("libs") + _service_packages,
    # schemas/ is the published contract (Avro + test vectors); it ships inside the
    # package as crawlstream.schemas so an installed service finds it without the repo.
    package_dir={"": "libs", "crawlstream.services": "services", "crawlstream.schemas": "schemas"},
    package_data={
        "crawlstream": ["py.typed"],
        # the scheduler's Lua scripts, read with importlib.resources (crawlstream.politeness._lua)
        "crawlstream.politeness.lua": ["*.lua"],
        "crawlstream.schemas": ["*.avsc", "*.json", "test-vectors/*.json"],
        "crawlstream.schemas.history": ["*.avsc"],
    },
)
