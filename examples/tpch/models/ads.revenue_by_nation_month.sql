-- description: orders and revenue per nation and month of the order date
-- primary_key: [n_nationkey, order_month]
-- bucket_key: n_nationkey
-- buckets: 4
SELECT
  n_nationkey,
  n_name,
  CAST(trunc(o_orderdate, 'MM') AS DATE) AS order_month,
  count(*) AS order_count,
  CAST(sum(o_totalprice) AS DECIMAL(22, 2)) AS revenue,
  CAST(max(o_totalprice) AS DECIMAL(12, 2)) AS max_totalprice
FROM dwd.orders_enriched
GROUP BY n_nationkey, n_name, CAST(trunc(o_orderdate, 'MM') AS DATE)
