-- The real-program workload of scripts/demo.sh and replay/compare_real_test.py:
-- sqlite3 building, indexing, querying, updating and vacuuming 20,000 rows in memory.
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<20000)
INSERT INTO t SELECT x, printf('name-%d-%s', x, hex(randomblob(8))), x*1.5 FROM c;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(v) FROM t WHERE name LIKE 'name-1%';
UPDATE t SET name = upper(name) WHERE id % 7 = 0;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
