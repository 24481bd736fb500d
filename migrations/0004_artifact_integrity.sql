CREATE TABLE `loop_artifact_usage` (
	`loop_id` text PRIMARY KEY NOT NULL,
	`bytes` integer NOT NULL
);
--> statement-breakpoint
ALTER TABLE `artifacts` ADD `etag` text;
--> statement-breakpoint
-- Each loop's running total starts as the sum of what it recorded before this migration: the only SUM, once.
INSERT INTO `loop_artifact_usage` (`loop_id`, `bytes`) SELECT `loop_id`, SUM(`size`) FROM `artifacts` GROUP BY `loop_id`;
