"""Development and test tools: local servers and the synthetic web, never part of a deployed
service (nothing outside this package and the CLI's dev commands imports it; a test checks).

* ``localkafka``: a real Apache Kafka cluster (KRaft) on loopback, from the jars ``make kafka``
  fetched (``crawlstream local-kafka``);
* ``localregistry``: a real Confluent-compatible schema registry (Apicurio) on loopback;
* ``localpg``: a throwaway PostgreSQL server (Debian's binaries) for the migration tests;
* ``localproc``: what they share: free ports, children that die with their parent, bounded stops;
* ``demoweb``: the synthetic web ``crawlstream demo`` and the end-to-end tests crawl;
* ``deployment``: the distributed deployment on one machine (every service its own process,
  Kafka, a Redis server, the demo web) the Kafka tests and the soak (``bench soak``) run.
"""
