CREATE TABLE `web_sessions` (
	`id` text PRIMARY KEY NOT NULL,
	`kind` text NOT NULL,
	`team_id` text NOT NULL,
	`token_id` text,
	`owner_digest` text,
	`csrf` text NOT NULL,
	`created_at` text NOT NULL,
	`expires_at` text NOT NULL,
	`used_at` text
);
--> statement-breakpoint
CREATE INDEX `web_sessions_by_token` ON `web_sessions` (`token_id`);--> statement-breakpoint
CREATE INDEX `web_sessions_by_expiry` ON `web_sessions` (`expires_at`);--> statement-breakpoint
ALTER TABLE `loops` ADD `t0_score` real;--> statement-breakpoint
ALTER TABLE `loops` ADD `best_score` real;--> statement-breakpoint
ALTER TABLE `loops` ADD `runners` integer DEFAULT 0 NOT NULL;