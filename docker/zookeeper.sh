#!/bin/sh
# ZooKeeper (Debian's package) in the foreground, logging to the console: the cluster's metadata and
# its controller election.
set -e
cat > /tmp/zoo.cfg <<CFG
tickTime=500
dataDir=/var/lib/binlake/zookeeper
clientPort=2181
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
maxClientCnxns=0
CFG
cat > /tmp/log4j.properties <<LOG
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
LOG
exec java -Xmx256m -cp /tmp:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain /tmp/zoo.cfg
