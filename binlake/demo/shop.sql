-- The demo's shop (binlake demo, docs/quickstart.md): customers and products with their first rows,
-- and orders, which come later. The types are those whose mapping is worth seeing: DECIMAL (exact
-- strings), DATETIME, JSON, ENUM.
CREATE TABLE customers (
  id INT PRIMARY KEY,
  name VARCHAR(64) NOT NULL,
  email VARCHAR(128) NOT NULL,
  tier ENUM('basic', 'silver', 'gold') NOT NULL DEFAULT 'basic',
  signed_up DATETIME(3) NOT NULL);

CREATE TABLE products (
  sku VARCHAR(16) PRIMARY KEY,
  name VARCHAR(64) NOT NULL,
  price DECIMAL(10, 2) NOT NULL,
  attributes JSON);

CREATE TABLE orders (
  id INT PRIMARY KEY,
  customer_id INT NOT NULL,
  sku VARCHAR(16) NOT NULL,
  quantity SMALLINT UNSIGNED NOT NULL,
  total DECIMAL(12, 2) NOT NULL,
  status ENUM('new', 'paid', 'shipped', 'cancelled') NOT NULL DEFAULT 'new',
  ordered_at DATETIME NOT NULL);

INSERT INTO customers VALUES
  (1, 'Ada Lovelace', 'ada@example.com', 'gold', '2024-01-05 09:30:00.125'),
  (2, 'Alan Turing', 'alan@example.com', 'basic', '2024-02-11 17:02:45.500'),
  (3, 'Grace Hopper', 'grace@example.com', 'silver', '2024-03-20 08:15:00.000');

INSERT INTO products VALUES
  ('MUG-01', 'Binlog mug', 12.50, '{"color": "teal", "ml": 350}'),
  ('TEE-01', 'Exactly-once tee', 19.90, '{"sizes": ["S", "M", "L"]}'),
  ('STK-01', 'Sticker pack', 3.00, NULL);
