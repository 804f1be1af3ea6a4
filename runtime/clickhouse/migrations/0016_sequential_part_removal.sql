-- Remove outdated parts in the cleaning thread, not in a burst of pool threads. Past 100
-- outdated parts (the default threshold) a table's cleanup takes up to 128 threads from
-- the engine's global pool at once; that pool keeps idle threads (up to 1000), and each
-- thread later running a query holds 3 open /proc files. In the sink's embedded engine,
-- which inserts small batches all day, that was the soak's growth: 30 threads became 160
-- and open files 70 became ~480 after the first cleanup (measured, chdb 26.9; docs/
-- reliability.md). A server's cleanup then takes longer on a table with many thousand
-- outdated parts at once, which the sink's merges never leave.
ALTER TABLE {db}.turns MODIFY SETTING concurrent_part_removal_threshold = 1000000;
ALTER TABLE {db}.traces MODIFY SETTING concurrent_part_removal_threshold = 1000000;
ALTER TABLE {db}.feedback MODIFY SETTING concurrent_part_removal_threshold = 1000000;
ALTER TABLE {db}.worker_metrics MODIFY SETTING concurrent_part_removal_threshold = 1000000;
ALTER TABLE {db}.events MODIFY SETTING concurrent_part_removal_threshold = 1000000;
