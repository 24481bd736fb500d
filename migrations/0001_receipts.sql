CREATE TABLE `receipts` (
	`id` text PRIMARY KEY NOT NULL,
	`loop_id` text NOT NULL,
	`kind` text NOT NULL,
	`head_seq` integer NOT NULL,
	`head_hash` text NOT NULL,
	`keyid` text NOT NULL,
	`envelope` text NOT NULL,
	`issued_at` text NOT NULL
);
--> statement-breakpoint
CREATE INDEX `receipts_by_loop` ON `receipts` (`loop_id`,`issued_at`);