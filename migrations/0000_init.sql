CREATE TABLE `candidates` (
	`loop_id` text NOT NULL,
	`id` text NOT NULL,
	`parent` text NOT NULL,
	`commit_sha` text NOT NULL,
	`status` text NOT NULL,
	`reason` text,
	`detail` text,
	`log_digests` text NOT NULL,
	`proposed_at` text NOT NULL,
	`updated_seq` integer NOT NULL,
	PRIMARY KEY(`loop_id`, `id`)
);
--> statement-breakpoint
CREATE TABLE `events_index` (
	`loop_id` text NOT NULL,
	`seq` integer NOT NULL,
	`type` text NOT NULL,
	`at` text NOT NULL,
	`hash` text NOT NULL,
	`candidate_id` text,
	PRIMARY KEY(`loop_id`, `seq`)
);
--> statement-breakpoint
CREATE INDEX `events_by_type` ON `events_index` (`type`,`at`);--> statement-breakpoint
CREATE TABLE `loops` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`mode` text NOT NULL,
	`status` text NOT NULL,
	`contract_hash` text NOT NULL,
	`iteration` integer NOT NULL,
	`best_candidate_id` text NOT NULL,
	`best_commit` text NOT NULL,
	`halt_reason` text,
	`exit_class` integer,
	`head_seq` integer NOT NULL,
	`head_hash` text NOT NULL,
	`created_at` text NOT NULL,
	`updated_at` text NOT NULL,
	`updated_seq` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `loops_created_at` ON `loops` (`created_at`,`id`);