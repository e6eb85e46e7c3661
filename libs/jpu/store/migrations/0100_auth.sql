-- Labs, users and API tokens (SPEC §1.3, §8 Auth). Owned by libs/jpu/store/auth.py and jpu-admin.
-- Tokens are stored only as sha256 hex digests of the random bearer token; the token itself is
-- shown once when created and never stored.

CREATE TABLE IF NOT EXISTS labs (
    name        text PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS users (
    name             text PRIMARY KEY,
    lab              text NOT NULL REFERENCES labs (name),
    role             text NOT NULL DEFAULT 'user'
                     CHECK (role IN ('user', 'lab_admin', 'admin')),
    max_active_jobs  integer CHECK (max_active_jobs IS NULL OR max_active_jobs >= 0),
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS users_lab_idx ON users (lab);

CREATE TABLE IF NOT EXISTS api_tokens (
    token_hash  text PRIMARY KEY CHECK (length(token_hash) = 64),
    "user"      text NOT NULL REFERENCES users (name),  -- quoted: `user` is reserved
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

CREATE INDEX IF NOT EXISTS api_tokens_user_active_idx
    ON api_tokens ("user") WHERE revoked_at IS NULL;
