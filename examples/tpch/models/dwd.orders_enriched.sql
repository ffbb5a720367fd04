-- description: every order with its customer's name and segment and its nation
-- primary_key: [o_orderkey]
-- buckets: 4
SELECT
  o.*,
  c.c_name,
  c.c_mktsegment,
  n.n_nationkey,
  n.n_name
FROM ods.orders AS o
JOIN ods.customer AS c ON o.o_custkey = c.c_custkey
JOIN ods.nation AS n ON c.c_nationkey = n.n_nationkey
