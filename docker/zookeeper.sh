#!/bin/sh
# ZooKeeper (Debian's package) in the foreground: the cluster's metadata and its controller election.
set -e
DATA=/var/lib/binlake/zookeeper
cat > /tmp/zoo.cfg <<CFG
tickTime=500
dataDir=$DATA
clientPort=2181
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat
maxClientCnxns=0
CFG
exec java -Xmx256m -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain /tmp/zoo.cfg
