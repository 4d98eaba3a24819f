"""`binlake demo`: the whole pipeline on one machine, without Docker.

  command.py   the click command: start the stages, show the events, compare, stop
  services.py  the stages (MariaDB or MySQL sandbox, shop database, brokers, connector, ...) and their processes
  shop.py      the demo's tables, first rows and workload
  events.py    change events of either format in one shape; tables rebuilt from them
  view.py      event lines and the summary table
"""
