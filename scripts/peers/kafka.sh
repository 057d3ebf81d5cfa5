#!/usr/bin/env bash
# Fetches the Apache Kafka broker jars (KRaft mode) that the Kafka exporter's
# tests run as a real peer, from Maven Central, into a cache directory outside
# the repository. Idempotent: a complete cache is left alone.
#
#   scripts/peers/kafka.sh            # into $LOUPE_KAFKA_LIBS or the default
#
# LOUPE_KAFKA_LIBS  cache directory (default /var/cache/loupe/peers/kafka-4.3.1)
# KAFKA_VERSION     broker version (default 4.3.1; 4.4.0 lacks kafka-tools on
#                   Maven Central)
#
# Needs java (openjdk-17-jre-headless) and mvn (maven). The directory is
# complete when it holds the marker file .complete, written last, so an
# interrupted fetch is redone rather than half-used.
set -euo pipefail

version=${KAFKA_VERSION:-4.3.1}
dir=${LOUPE_KAFKA_LIBS:-/var/cache/loupe/peers/kafka-${version}}
log4j=2.24.3

if [ -f "$dir/.complete" ]; then
	exit 0
fi
for tool in java mvn; do
	if ! command -v "$tool" >/dev/null; then
		echo "kafka.sh: $tool is missing (apt-get install openjdk-17-jre-headless maven)" >&2
		exit 1
	fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>loupe.peers</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>${version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>${version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>${log4j}</version>
    </dependency>
  </dependencies>
</project>
POM

echo "kafka.sh: fetching Kafka ${version} jars into ${dir}" >&2
mkdir -p "$dir"
mvn -B -q -f "$tmp/pom.xml" dependency:copy-dependencies \
	-DincludeScope=runtime -DoutputDirectory="$dir" >"$tmp/mvn.log" 2>&1 || {
	cat "$tmp/mvn.log" >&2
	exit 1
}
if ! ls "$dir"/kafka_2.13-"${version}".jar >/dev/null 2>&1; then
	echo "kafka.sh: kafka_2.13-${version}.jar missing after the fetch" >&2
	exit 1
fi
touch "$dir/.complete"
echo "kafka.sh: $(ls "$dir" | wc -l) jars, $(du -sh "$dir" | cut -f1)" >&2
