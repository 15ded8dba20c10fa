-- The Nexmark streams as sources, with a 4 s watermark delay. `weir bench nexmark` creates
-- these with nexmark.event.num set to its --events. `bid.p_time` is the time Weir stored the
-- bid at (processing time, for q12).
CREATE SOURCE person (WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH (connector = 'nexmark', nexmark.table.type = 'person', nexmark.event.num = '100000');
CREATE SOURCE auction (WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH (connector = 'nexmark', nexmark.table.type = 'auction', nexmark.event.num = '100000');
CREATE SOURCE bid (p_time AS PROCTIME(), WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
  WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '100000');
