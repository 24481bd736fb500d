CREATE TABLE `artifacts` (
	`loop_id` text NOT NULL,
	`sha256` text NOT NULL,
	`size` integer NOT NULL,
	`name` text NOT NULL,
	`content_type` text NOT NULL,
	`created_at` text NOT NULL,
	PRIMARY KEY(`loop_id`, `sha256`)
);
--> statement-breakpoint
CREATE INDEX `artifacts_by_loop` ON `artifacts` (`loop_id`,`created_at`,`sha256`);