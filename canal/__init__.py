"""Canal compatibility: Canal 1.1.x's conf directory read as Canal reads it, its destinations run on binlake's
MySQL connector (docs/canal.md). The MQ routing rules live in cdc/canal_routing.py, below the emitter that
applies them."""
