/**
 * Where the database backups taken before migrations go on the database node:
 * `<BACKUP_DIR>/<run>/<service>-<time>.sql.gz` (root only, 0700/0600).
 */
export const BACKUP_DIR = '/var/lib/stackctl/backups';
