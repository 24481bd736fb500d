CREATE TABLE `teams` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`created_at` text NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `teams_name_unique` ON `teams` (`name`);--> statement-breakpoint
CREATE TABLE `tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`team_id` text NOT NULL,
	`secret_hash` text NOT NULL,
	`scopes` text NOT NULL,
	`loop_id` text,
	`name` text,
	`created_at` text NOT NULL,
	`created_by` text NOT NULL,
	`expires_at` text,
	`revoked_at` text
);
--> statement-breakpoint
CREATE INDEX `tokens_by_team` ON `tokens` (`team_id`,`created_at`);--> statement-breakpoint
ALTER TABLE `loops` ADD `team_id` text DEFAULT 'owner' NOT NULL;--> statement-breakpoint
CREATE INDEX `loops_by_team` ON `loops` (`team_id`,`created_at`,`id`);