"""The deployable services, one folder each: its README (what it consumes and produces, its
state, how it scales) and ``main.py``, its process entry point (``crawlstream service <name>``).

The wiring itself is in the library (``crawlstream.roles`` names each service's ``service``
module), so that ``crawlstream run`` builds every service in one process from the same code;
nothing in the library imports this package (ADR 027).
"""
