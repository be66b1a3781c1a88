-- The read-only report database of the reference tool server.
-- Built into report.sqlite by faultday_refstack.tools.db.build_report_db;
-- edit this file, never the built database, so the data stays reproducible.
CREATE TABLE regions (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
INSERT INTO regions (id, name) VALUES (1, 'emea'), (2, 'amer'), (3, 'apac');

CREATE TABLE customers (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  region_id INTEGER NOT NULL REFERENCES regions(id),
  tier TEXT NOT NULL CHECK (tier IN ('free', 'pro', 'enterprise'))
);
INSERT INTO customers (id, name, region_id, tier) VALUES
  (1, 'Acme Robotics', 1, 'enterprise'),
  (2, 'Blue Harbor Labs', 2, 'pro'),
  (3, 'Cobalt Health', 2, 'enterprise'),
  (4, 'Delta Freight', 3, 'free'),
  (5, 'Evergreen Bank', 1, 'enterprise'),
  (6, 'Fjord Analytics', 1, 'pro'),
  (7, 'Granite Games', 3, 'pro'),
  (8, 'Helix Genomics', 2, 'enterprise');

CREATE TABLE revenue (
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  quarter TEXT NOT NULL,
  amount_usd INTEGER NOT NULL,
  PRIMARY KEY (customer_id, quarter)
);
INSERT INTO revenue (customer_id, quarter, amount_usd) VALUES
  (1, '2026Q1', 120000), (1, '2026Q2', 131000), (1, '2026Q3', 128500),
  (2, '2026Q1', 18000),  (2, '2026Q2', 21000),  (2, '2026Q3', 24500),
  (3, '2026Q1', 97000),  (3, '2026Q2', 99000),  (3, '2026Q3', 104000),
  (4, '2026Q1', 0),      (4, '2026Q2', 0),      (4, '2026Q3', 1200),
  (5, '2026Q1', 210000), (5, '2026Q2', 205000), (5, '2026Q3', 219000),
  (6, '2026Q1', 15500),  (6, '2026Q2', 16200),  (6, '2026Q3', 17800),
  (7, '2026Q1', 22000),  (7, '2026Q2', 19500),  (7, '2026Q3', 18700),
  (8, '2026Q1', 88000),  (8, '2026Q2', 91500),  (8, '2026Q3', 95000);

CREATE TABLE incidents (
  id INTEGER PRIMARY KEY,
  opened TEXT NOT NULL,
  severity TEXT NOT NULL CHECK (severity IN ('SEV1', 'SEV2', 'SEV3')),
  component TEXT NOT NULL,
  title TEXT NOT NULL,
  minutes_to_recover INTEGER NOT NULL
);
INSERT INTO incidents (id, opened, severity, component, title, minutes_to_recover) VALUES
  (1, '2026-01-14', 'SEV2', 'llm-primary', 'GPU Xid 79 on primary replica', 14),
  (2, '2026-02-03', 'SEV3', 'qdrant', 'Slow vector search after compaction', 41),
  (3, '2026-03-22', 'SEV1', 'redis', 'Session cache lost after failover', 67),
  (4, '2026-05-09', 'SEV3', 'tools', 'Report tool saturated at month end', 22),
  (5, '2026-07-30', 'SEV2', 'triton', 'Embedder OOM under burst load', 9);

-- Documents that search_docs searches (full text).
CREATE VIRTUAL TABLE docs USING fts5(doc_id UNINDEXED, title, body);
INSERT INTO docs (doc_id, title, body) VALUES
  ('runbook-gpu-loss', 'Runbook: GPU loss on an LLM replica',
   'When a replica loses its GPU (Xid 79), traffic moves to the backup model and the breaker opens. Restart the replica and watch the error rate.'),
  ('runbook-redis', 'Runbook: Redis unavailable',
   'Chat keeps answering without history and marks answers degraded. Sessions return when Redis is back; task checkpoints resume.'),
  ('runbook-vector', 'Runbook: vector store degraded',
   'If recall drops while health checks stay green, check the collection alias and the point count of the collection behind it.'),
  ('policy-refunds', 'Refund policy',
   'Enterprise customers may request a refund within 30 days. Pro customers within 14 days. Free tier has no refunds.'),
  ('policy-oncall', 'On-call policy',
   'SEV1 pages the primary and secondary on-call. SEV2 pages the primary. SEV3 opens a ticket for the next business day.'),
  ('faq-quota', 'FAQ: rate limits and quotas',
   'The gateway answers 429 with Retry-After when more requests are in flight than it admits; clients should back off.');
