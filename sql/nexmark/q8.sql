-- q8: monitor new users. People who opened an auction in the 10 s window they joined in.
CREATE MATERIALIZED VIEW q8 AS
  SELECT p.id, p.name, p.starttime
  FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(person, date_time, INTERVAL '10' SECOND)
    GROUP BY id, name, window_start, window_end
  ) p
  JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(auction, date_time, INTERVAL '10' SECOND)
    GROUP BY seller, window_start, window_end
  ) a ON p.id = a.seller AND p.starttime = a.starttime AND p.endtime = a.endtime;
