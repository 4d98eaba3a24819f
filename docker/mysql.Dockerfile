# Oracle MySQL for the compose demo (docker-compose.mysql.yml). Its base is the root sandbox.sql
# runs mysqld from — Debian sid with sid's mysql-server (`make mysql-root`) — imported as
# binlake-mysql-root:dev by `make compose-mysql-root`: no image registry, and the same server the
# tests run. Built with docker/ as its context.
FROM binlake-mysql-root:dev
RUN mkdir -p /var/lib/binlake/mysql /run/mysqld \
 && chown mysql:mysql /var/lib/binlake/mysql /run/mysqld
COPY mysql.sh mysql-init.sql /opt/binlake/docker/
USER mysql
CMD ["/opt/binlake/docker/mysql.sh"]
