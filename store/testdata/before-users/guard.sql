PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL);
INSERT INTO schema_migrations VALUES(1,'0001_audit.sql','2026-11-27T20:30:40.778Z');
INSERT INTO schema_migrations VALUES(2,'0002_journals.sql','2026-11-27T20:30:40.779Z');
INSERT INTO schema_migrations VALUES(3,'0003_tool_reviews.sql','2026-11-27T20:30:40.779Z');
INSERT INTO schema_migrations VALUES(4,'0004_config_changes.sql','2026-11-27T20:30:40.780Z');
INSERT INTO schema_migrations VALUES(5,'0005_drop_journals.sql','2026-11-27T20:30:40.785Z');
INSERT INTO schema_migrations VALUES(6,'0006_record_approval.sql','2026-11-27T20:30:40.780Z');
INSERT INTO schema_migrations VALUES(7,'0007_tree.sql','2026-11-27T20:30:40.780Z');
INSERT INTO schema_migrations VALUES(8,'0008_decisions.sql','2026-11-27T20:30:40.781Z');
INSERT INTO schema_migrations VALUES(9,'0009_call_index.sql','2026-11-27T20:30:40.782Z');
INSERT INTO schema_migrations VALUES(10,'0010_stream.sql','2026-11-27T20:30:40.783Z');
INSERT INTO schema_migrations VALUES(12,'0012_retention.sql','2026-11-27T20:30:40.783Z');
INSERT INTO schema_migrations VALUES(13,'0013_notify.sql','2026-11-27T20:30:40.784Z');
INSERT INTO schema_migrations VALUES(14,'0014_learned_rules_and_replicas.sql','2026-11-27T20:30:40.784Z');
CREATE TABLE records (
    seq           INTEGER PRIMARY KEY,
    id            TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    kind          TEXT NOT NULL,
    time          TEXT NOT NULL,
    session       TEXT NOT NULL DEFAULT '',
    client        TEXT NOT NULL DEFAULT '',
    protocol      TEXT NOT NULL DEFAULT '',
    server        TEXT NOT NULL DEFAULT '',
    direction     TEXT NOT NULL DEFAULT '',
    method        TEXT NOT NULL DEFAULT '',
    tool          TEXT NOT NULL DEFAULT '',
    arguments     TEXT NOT NULL DEFAULT '',
    pin           TEXT NOT NULL DEFAULT '',
    decision      TEXT NOT NULL DEFAULT '',
    decided_by    TEXT NOT NULL DEFAULT '',
    reason        TEXT NOT NULL DEFAULT '',
    outcome       TEXT NOT NULL DEFAULT '',
    result        TEXT NOT NULL DEFAULT '',
    request_size  INTEGER NOT NULL DEFAULT 0,
    response_size INTEGER NOT NULL DEFAULT 0,
    duration_ms   INTEGER NOT NULL DEFAULT 0,
    detail        TEXT NOT NULL DEFAULT '',
    prev_hash     TEXT NOT NULL,
    hash          TEXT NOT NULL
, approval TEXT NOT NULL DEFAULT '', pruned INTEGER NOT NULL DEFAULT 0);
INSERT INTO records VALUES(1,'01a21eb3-f897-7e8d-820e-b394883755fe','call-0','request','2026-11-20T09:00:00.000Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/0"}','','allowed','','','','',0,0,0,'','','92ff6e2cf437d7ae10eec8ce4b4448d83a6bb5bd5ef4f88e022763e293b57267','',0);
INSERT INTO records VALUES(2,'01a21eb3-f897-7e8f-add9-e782b9ea9f45','call-0','outcome','2026-11-20T09:00:00.001Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/0"}','','allowed','','','ok','{"content":[]}',0,0,0,'','92ff6e2cf437d7ae10eec8ce4b4448d83a6bb5bd5ef4f88e022763e293b57267','044c599f5fec36abed051a8fd06075e13060316eec83bf73ec8ea6b7b38b0c40','',0);
INSERT INTO records VALUES(3,'01a21eb3-f898-72f7-a62b-e5f32e118be9','call-1','request','2026-11-20T09:00:01.000Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/1"}','','allowed','','','','',0,0,0,'','044c599f5fec36abed051a8fd06075e13060316eec83bf73ec8ea6b7b38b0c40','5e43a2e3d9c67d72902f8ccdbe7cece12d51d617c8cd47dadc6761092f0952ea','',0);
INSERT INTO records VALUES(4,'01a21eb3-f898-72f8-9874-6dba2aa3fe61','call-1','outcome','2026-11-20T09:00:01.001Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/1"}','','allowed','','','ok','{"content":[]}',0,0,0,'','5e43a2e3d9c67d72902f8ccdbe7cece12d51d617c8cd47dadc6761092f0952ea','72ed96b3e76b119c4677205f8a060b9064dcebe989fcd6b14c16c8b23aaa7442','',0);
INSERT INTO records VALUES(5,'01a21eb3-f898-7309-b2cf-b8a2c3e32f7f','call-2','request','2026-11-20T09:00:02.000Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/2"}','','allowed','','','','',0,0,0,'','72ed96b3e76b119c4677205f8a060b9064dcebe989fcd6b14c16c8b23aaa7442','2f7385b7c5619f1cd027c17f64657256dac0809ee9187a0f8e76ebbe1c632495','',0);
INSERT INTO records VALUES(6,'01a21eb3-f898-730a-a792-74b395ac99ae','call-2','outcome','2026-11-20T09:00:02.001Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/2"}','','allowed','','','ok','{"content":[]}',0,0,0,'','2f7385b7c5619f1cd027c17f64657256dac0809ee9187a0f8e76ebbe1c632495','e55f1deb00501c091f425e9c232509c0050bb1870260108282bb9fa035c01d61','',0);
INSERT INTO records VALUES(7,'01a21eb3-f898-7316-bc79-c81496daa13c','call-3','request','2026-11-20T09:00:03.000Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/3"}','','allowed','','','','',0,0,0,'','e55f1deb00501c091f425e9c232509c0050bb1870260108282bb9fa035c01d61','c6978b6380795aed78f6af5369545479704ec77d5f81e742fe7f89ec631af2b5','',0);
INSERT INTO records VALUES(8,'01a21eb3-f898-7317-9d48-629d54ada323','call-3','outcome','2026-11-20T09:00:03.001Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/3"}','','allowed','','','ok','{"content":[]}',0,0,0,'','c6978b6380795aed78f6af5369545479704ec77d5f81e742fe7f89ec631af2b5','dc67952e59b52d67a76a2e24ebc98674a4e594e05fc1593d56ae27ccfe97814c','',0);
INSERT INTO records VALUES(9,'01a21eb3-f898-7446-8936-277e085c1703','call-4','request','2026-11-20T09:00:04.000Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/4"}','','held','','','','',0,0,0,'','dc67952e59b52d67a76a2e24ebc98674a4e594e05fc1593d56ae27ccfe97814c','06e599f5b315d5acec9c817f48a1c2ff2816f63a47f664460f675ee77c9927e0','held-1',0);
INSERT INTO records VALUES(10,'01a21eb3-f898-7447-850d-76c53e2c7008','call-4','outcome','2026-11-20T09:00:04.001Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/4"}','','allowed','','','ok','{"content":[]}',0,0,0,'','06e599f5b315d5acec9c817f48a1c2ff2816f63a47f664460f675ee77c9927e0','d652f5ee15bbf88e05159263cf51aec525f216a172731fcd01d9a9e1f624bfac','',0);
INSERT INTO records VALUES(11,'01a21eb3-f898-7468-ac0e-acd7791bcf9c','call-5','request','2026-11-20T09:00:05.000Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/5"}','','allowed','','','','',0,0,0,'','d652f5ee15bbf88e05159263cf51aec525f216a172731fcd01d9a9e1f624bfac','feb871b89ad2aa8d5b7ab544d8212298d9f2466950c70e89c47bd059f1bcceaf','',0);
INSERT INTO records VALUES(12,'01a21eb3-f898-7469-99fc-6f08e4b862b9','call-5','outcome','2026-11-20T09:00:05.001Z','s1','claude-ai/0.1.0','','files','','tools/call','write_file','{"path":"/tmp/5"}','','allowed','','','ok','{"content":[]}',0,0,0,'','feb871b89ad2aa8d5b7ab544d8212298d9f2466950c70e89c47bd059f1bcceaf','9420a202054f255e6661a0476d6a813b21413fa4639aed551c7fe5ba10e47cb3','',0);
INSERT INTO records VALUES(13,'01a21eb3-f898-77ee-8b91-7958bb1a09a4','call-held-1','decision','2026-11-20T09:00:00.000Z','sess-1','claude-ai/0.1.0','','files','client_to_server','tools/call','write_file','','sha256:p','approved','bob','fine','','',0,0,0,'{"expires":"2026-11-20T10:00:00.000Z","held":"2026-11-20T09:00:00.000Z","held_reason":"writes to production","rule":"prod-writes"}','9420a202054f255e6661a0476d6a813b21413fa4639aed551c7fe5ba10e47cb3','7aa197650722dce3dfe79c16d0f8eed3cb13632116f84fb697aba71c004f3699','held-1',0);
INSERT INTO records VALUES(14,'01a21eb3-f89a-7370-b074-b49e03a990f7','ev','event','2026-11-20T09:00:00.000Z','','','','','','guard/server_exit','','','','','','','','',0,0,0,'{"status":0}','7aa197650722dce3dfe79c16d0f8eed3cb13632116f84fb697aba71c004f3699','a2435c5d875bf4adc795767373ffc0e76f2761c6ced700b8999f230055787983','',0);
CREATE TABLE tools (
    server     TEXT NOT NULL,
    name       TEXT NOT NULL,
    pin        TEXT NOT NULL,
    def        TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    last_seen  TEXT NOT NULL,
    PRIMARY KEY (server, name, pin)
);
CREATE TABLE approvals (
    id             TEXT PRIMARY KEY,
    session        TEXT NOT NULL DEFAULT '',
    client         TEXT NOT NULL DEFAULT '',
    server         TEXT NOT NULL,
    tool           TEXT NOT NULL,
    arguments      TEXT NOT NULL,
    digest         TEXT NOT NULL,
    pin            TEXT NOT NULL DEFAULT '',
    policy_version TEXT NOT NULL DEFAULT '',
    rule           TEXT NOT NULL DEFAULT '',
    held_reason    TEXT NOT NULL DEFAULT '',
    state          TEXT NOT NULL,
    decided_by     TEXT NOT NULL DEFAULT '',
    reason         TEXT NOT NULL DEFAULT '',
    created_at     TEXT NOT NULL,
    expires_at     TEXT NOT NULL,
    decided_at     TEXT NOT NULL DEFAULT '',
    used_at        TEXT NOT NULL DEFAULT ''
, call_id TEXT NOT NULL DEFAULT '');
INSERT INTO approvals VALUES('held-1','sess-1','claude-ai/0.1.0','files','write_file','','sha256:d','sha256:p','v1','prod-writes','writes to production','approved','bob','fine','2026-11-20T09:00:00.000Z','2026-11-20T10:00:00.000Z','2026-11-20T09:00:00.000Z','','call-held-1');
CREATE TABLE tool_reviews (
    server     TEXT NOT NULL,
    name       TEXT NOT NULL,
    pin        TEXT NOT NULL,
    state      TEXT NOT NULL,            -- accepted | pending | rejected
    cause      TEXT NOT NULL,            -- baseline | new | changed | flagged
    flags      TEXT NOT NULL DEFAULT '', -- JSON: what the description scan found
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    PRIMARY KEY (server, name, pin)
);
CREATE TABLE rate_limits (
    key        TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at INTEGER NOT NULL          -- unix microseconds
);
CREATE TABLE config_changes (
    digest     TEXT PRIMARY KEY,          -- sha256: of the files, as guard policy reload prints it
    summary    TEXT NOT NULL DEFAULT '',  -- what changed, one line each
    state      TEXT NOT NULL,             -- pending | applied | dismissed | superseded
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL
);
CREATE TABLE rules_written (
    digest     TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);
CREATE TABLE tree_hashes (
    idx  INTEGER PRIMARY KEY,
    hash BLOB NOT NULL
);
INSERT INTO tree_hashes VALUES(0,X'96496183fdecb4fa958b3dd539b78337583a1c0498f454538b1372e8ebe58180');
INSERT INTO tree_hashes VALUES(1,X'58ed10971ef34a05ac41b78121d5e7aab1d879ec92be63b16064b64615ff9fb7');
INSERT INTO tree_hashes VALUES(2,X'c6ff0bb76e3e4472e728c50f596ae062b7dbca2b2d63d83c49dd9da63384c9c2');
INSERT INTO tree_hashes VALUES(3,X'33977361b120aa9b8c9d41ea10743615c26a8e6107a21a11b09e99743c44395c');
INSERT INTO tree_hashes VALUES(4,X'5622a1e8d86f04ca5e4e6532fb167074523b17a54cf8df82cde3c0c8427f0527');
INSERT INTO tree_hashes VALUES(5,X'89b8704ffd1299bc91a1e092f26973953dc56d631682e116ef5fa5f1429e6962');
INSERT INTO tree_hashes VALUES(6,X'c4f6b05dd6b579c2fae73a7fb09fce7e2ed3de65263f67d15235199920b191b8');
INSERT INTO tree_hashes VALUES(7,X'ff052612d1fb5c82659974c22d01548bed4f56f3d237dae78ace78814c43724f');
INSERT INTO tree_hashes VALUES(8,X'50d195b1480c363a58a5e739aefb409b2d86633e6c3f6b35b4cc4912d3d8b9e2');
INSERT INTO tree_hashes VALUES(9,X'13dd2c42c49d1ee66f40bdbfda56e5c6aaac903b47cf6c643258b323d43853d4');
INSERT INTO tree_hashes VALUES(10,X'6f5d405c23fa4886f3c042c92361c0461ab1580db98fd134a51c22ec5c572489');
INSERT INTO tree_hashes VALUES(11,X'46a5f7628efd539ec248491eab66ac72473297da1d0b2248de4998200fc4e804');
INSERT INTO tree_hashes VALUES(12,X'3bb273ee3752289acbbea53ae303edee62cc035542abff113c074d2ff4d59c73');
INSERT INTO tree_hashes VALUES(13,X'dd6f900ebba37644433ec1a8860a4b85a1b8c6beb68a3314bd4883a848634723');
INSERT INTO tree_hashes VALUES(14,X'99132903b2352d1ddb36cd2ae15fa21618e0a0b3e53b685dfdc397dab2e2043d');
INSERT INTO tree_hashes VALUES(15,X'6c535aa0b545ec36f767a21ffb57569a63492796b561df26068086bf4239bd34');
INSERT INTO tree_hashes VALUES(16,X'de99923335a26eda0150b7658511fda320c15d9ae4265bedf50fae5811b358df');
INSERT INTO tree_hashes VALUES(17,X'49b09e9ff97b304c58b80fe2f0c99ec9edbabc1cb4ab4941a8e464c4407b80e6');
INSERT INTO tree_hashes VALUES(18,X'12882f901a570a2c911807f09d18fb917578c3ab073f765248a7b948549334db');
INSERT INTO tree_hashes VALUES(19,X'319fe70456a3ba11ab7764ae28c00b165a2baf7095b7655fce198c392a6754e0');
INSERT INTO tree_hashes VALUES(20,X'03afa85df10ee36839259fbfeff3c3cfe868be485fddc5b01e844fcf7c243803');
INSERT INTO tree_hashes VALUES(21,X'6df112854d6c960b1e3f7f4358c6e4505bec63ecd55160a055264f27fc246393');
INSERT INTO tree_hashes VALUES(22,X'8b35b510495e5cc5bf83e3b14f23f1b875de3d4c607190f240ed0b1e4b35d744');
INSERT INTO tree_hashes VALUES(23,X'f577ce8e98ee1f0edfb7b0b9d2e1425b31575c4ad78a0cfa3954b45f68672ba6');
INSERT INTO tree_hashes VALUES(24,X'7b805372b7e4051477d9c9e7e3e5c2b651248f5d9e33ec85ae30e889f5171cad');
CREATE TABLE checkpoints (
    size INTEGER PRIMARY KEY,
    note TEXT NOT NULL,
    time TEXT NOT NULL
);
INSERT INTO checkpoints VALUES(14,replace('guard-audit/356bae75b7971208\n14\nWe7Dk6G90kta6ZvHcsmJS1TKDohPwb+1huNANUa627Y=\n\n— guard-audit/356bae75b7971208 T6g9BwopYQod/VFydx1JIePqBPaMEW1/KU9V6+oOZzjQqP3+SC71CTXBp8HGzaSq/NrL+QiYWPBKodmrJpvXrM6Pggw=\n','\n',char(10)),'2026-11-20T09:00:00.000Z');
CREATE TABLE audit_verifications (
    id       INTEGER PRIMARY KEY,
    time     TEXT NOT NULL,
    ok       INTEGER NOT NULL,
    records  INTEGER NOT NULL DEFAULT 0,
    problem  TEXT NOT NULL DEFAULT '',
    took_ms  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE call_index (
    k          INTEGER PRIMARY KEY,
    call_id    TEXT NOT NULL UNIQUE,
    req_seq    INTEGER NOT NULL,            -- the call's first request record
    out_seq    INTEGER NOT NULL DEFAULT 0,  -- its latest outcome record (0: none yet)
    dec_seq    INTEGER NOT NULL,            -- the record whose decision the call shows
    server     TEXT NOT NULL DEFAULT '',
    tool       TEXT NOT NULL DEFAULT '',
    client     TEXT NOT NULL DEFAULT '',
    session    TEXT NOT NULL DEFAULT '',
    decision   TEXT NOT NULL DEFAULT '',
    decided_by TEXT NOT NULL DEFAULT '',
    outcome    TEXT NOT NULL DEFAULT '',
    approval   TEXT NOT NULL DEFAULT ''
);
INSERT INTO call_index VALUES(1882367144755200000,'call-0',1,2,2,'files','write_file','claude-ai/0.1.0','s1','allowed','','ok','');
INSERT INTO call_index VALUES(1882367145803776000,'call-1',3,4,4,'files','write_file','claude-ai/0.1.0','s1','allowed','','ok','');
INSERT INTO call_index VALUES(1882367146852352000,'call-2',5,6,6,'files','write_file','claude-ai/0.1.0','s1','allowed','','ok','');
INSERT INTO call_index VALUES(1882367147900928000,'call-3',7,8,8,'files','write_file','claude-ai/0.1.0','s1','allowed','','ok','');
INSERT INTO call_index VALUES(1882367148949504000,'call-4',9,10,10,'files','write_file','claude-ai/0.1.0','s1','allowed','','ok','held-1');
INSERT INTO call_index VALUES(1882367149998080000,'call-5',11,12,12,'files','write_file','claude-ai/0.1.0','s1','allowed','','ok','');
PRAGMA writable_schema=ON;
INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','call_text','call_text',0,'CREATE VIRTUAL TABLE call_text USING fts5 (
    arguments, result,
    content = '''', columnsize = 0,
    tokenize = ''unicode61 remove_diacritics 2''
)');
CREATE TABLE IF NOT EXISTS 'call_text_data'(id INTEGER PRIMARY KEY, block BLOB);
INSERT INTO call_text_data VALUES(1,X'061206');
INSERT INTO call_text_data VALUES(10,X'000000000101010001010101');
INSERT INTO call_text_data VALUES(137438953473,X'000001020230308d87f0af8fa080800002040101318d87f0af919a80800002040101328d87f0af939480800002040101338d87f0af958e80800002040101348d87f0af978880800002040101358d87f0af998280800002040107636f6e74656e748d87f0af8fa08080000601010283f48080000601010283f48080000601010283f48080000601010283f48080000601010283f4808000060101020104706174688d87f0af8fa0808000020283f4808000020283f4808000020283f4808000020283f4808000020283f480800002020103746d708d87f0af8fa0808000020383f4808000020383f4808000020383f4808000020383f4808000020383f48080000203040e0e0e0e0e0e4334');
CREATE TABLE IF NOT EXISTS 'call_text_idx'(segid, term, pgno, PRIMARY KEY(segid, term)) WITHOUT ROWID;
INSERT INTO call_text_idx VALUES(1,X'',2);
CREATE TABLE IF NOT EXISTS 'call_text_config'(k PRIMARY KEY, v) WITHOUT ROWID;
INSERT INTO call_text_config VALUES('version',4);
CREATE TABLE leases (
    name     TEXT PRIMARY KEY,
    holder   TEXT NOT NULL,
    expires  INTEGER NOT NULL,          -- unix milliseconds
    acquired TEXT NOT NULL              -- when this holder took it
);
INSERT INTO leases VALUES('checkpoint','01a21eb3-f896-7a78-8b83-f87555b9edb1',0,'2026-11-20T09:00:00.000Z');
CREATE TABLE stream_cursors (
    receiver TEXT PRIMARY KEY,          -- policy.Stream.Name()
    seq      INTEGER NOT NULL,
    updated  TEXT NOT NULL
);
CREATE TABLE retention_grant (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL
);
CREATE TABLE retention_runs (
    id       INTEGER PRIMARY KEY,
    time     TEXT NOT NULL,
    first    INTEGER NOT NULL DEFAULT 0,
    last     INTEGER NOT NULL DEFAULT 0,
    pruned   INTEGER NOT NULL DEFAULT 0,
    archive  TEXT NOT NULL DEFAULT '',
    sha256   TEXT NOT NULL DEFAULT '',
    record   TEXT NOT NULL DEFAULT '',
    resume   INTEGER NOT NULL DEFAULT 1,
    problem  TEXT NOT NULL DEFAULT ''
);
CREATE TABLE learned_rules (
    seq       INTEGER PRIMARY KEY,
    name      TEXT NOT NULL UNIQUE,
    server    TEXT NOT NULL,
    tool      TEXT NOT NULL,
    method    TEXT NOT NULL,
    uri       TEXT NOT NULL DEFAULT '',
    when_expr TEXT NOT NULL DEFAULT '',
    action    TEXT NOT NULL,
    reason    TEXT NOT NULL DEFAULT '',
    added     TEXT NOT NULL
);
CREATE TABLE replicas (
    id             TEXT PRIMARY KEY,
    host           TEXT NOT NULL,
    pid            INTEGER NOT NULL,
    process        TEXT NOT NULL,
    version        TEXT NOT NULL,
    config_digest  TEXT NOT NULL,
    policy_version TEXT NOT NULL,
    started        TEXT NOT NULL,
    seen           TEXT NOT NULL
);
CREATE TABLE rounds (
    key        TEXT PRIMARY KEY,
    call_id    TEXT NOT NULL,
    tool       TEXT NOT NULL,
    digest     TEXT NOT NULL,
    pin        TEXT NOT NULL,
    decision   TEXT NOT NULL,
    decided_by TEXT NOT NULL,
    reason     TEXT NOT NULL,
    expires    INTEGER NOT NULL
);
CREATE INDEX records_call ON records (call_id, kind, seq);
CREATE INDEX records_time ON records (time);
CREATE INDEX approvals_state ON approvals (state, created_at);
CREATE INDEX approvals_shape ON approvals (server, tool, digest, state);
CREATE TRIGGER tree_hashes_no_update BEFORE UPDATE ON tree_hashes
BEGIN SELECT RAISE(ABORT, 'the audit tree is append-only'); END;
CREATE TRIGGER tree_hashes_no_delete BEFORE DELETE ON tree_hashes
BEGIN SELECT RAISE(ABORT, 'the audit tree is append-only'); END;
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'audit checkpoints are append-only'); END;
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints
BEGIN SELECT RAISE(ABORT, 'audit checkpoints are append-only'); END;
CREATE INDEX call_index_server ON call_index (server);
CREATE INDEX call_index_tool ON call_index (tool);
CREATE INDEX call_index_client ON call_index (client);
CREATE INDEX call_index_session ON call_index (session);
CREATE INDEX call_index_decision ON call_index (decision);
CREATE INDEX call_index_decided_by ON call_index (decided_by);
CREATE INDEX call_index_outcome ON call_index (outcome);
CREATE INDEX records_approval ON records (approval) WHERE approval != '';
CREATE VIEW calls AS
SELECT
    c.call_id                AS id,
    q.time,
    q.session,
    q.client,
    q.protocol,
    q.server,
    q.direction,
    q.method,
    q.tool,
    q.arguments,
    q.pin,
    d.decision,
    d.decided_by,
    d.reason,
    COALESCE(o.outcome, '')       AS outcome,
    COALESCE(o.result, '')        AS result,
    q.request_size,
    COALESCE(o.response_size, 0)  AS response_size,
    COALESCE(o.duration_ms, 0)    AS duration_ms,
    COALESCE(o.detail, q.detail)  AS detail,
    COALESCE(o.hash, q.hash)      AS hash,
    c.approval
FROM call_index c
JOIN records q ON q.seq = c.req_seq
JOIN records d ON d.seq = c.dec_seq
LEFT JOIN records o ON o.seq = c.out_seq;
CREATE INDEX records_kind ON records (kind, time) WHERE kind NOT IN ('request', 'outcome');
CREATE TRIGGER retention_grant_checkpointed BEFORE INSERT ON retention_grant
WHEN NEW.last_seq > (SELECT COALESCE(MAX(size), 0) FROM checkpoints) OR NEW.first_seq < 1
BEGIN SELECT RAISE(ABORT, 'retention may remove only the bodies of records a checkpoint covers'); END;
CREATE TRIGGER records_no_update BEFORE UPDATE ON records
WHEN NOT EXISTS (SELECT 1 FROM retention_grant g WHERE OLD.seq BETWEEN g.first_seq AND g.last_seq)
    OR OLD.pruned != 0 OR NEW.pruned != 1
    OR NEW.seq IS NOT OLD.seq OR NEW.id IS NOT OLD.id OR NEW.call_id IS NOT OLD.call_id
    OR NEW.kind IS NOT OLD.kind OR NEW.time IS NOT OLD.time
    OR NEW.prev_hash IS NOT OLD.prev_hash OR NEW.hash IS NOT OLD.hash
    OR NEW.session != '' OR NEW.client != '' OR NEW.protocol != '' OR NEW.server != ''
    OR NEW.direction != '' OR NEW.method != '' OR NEW.tool != '' OR NEW.arguments != ''
    OR NEW.pin != '' OR NEW.decision != '' OR NEW.decided_by != '' OR NEW.reason != ''
    OR NEW.outcome != '' OR NEW.result != '' OR NEW.detail != '' OR NEW.approval != ''
    OR NEW.request_size != 0 OR NEW.response_size != 0 OR NEW.duration_ms != 0
BEGIN SELECT RAISE(ABORT, 'audit records are append-only: only the retention job removes a body, under its grant'); END;
CREATE TRIGGER records_no_delete BEFORE DELETE ON records
BEGIN SELECT RAISE(ABORT, 'audit records are append-only'); END;
CREATE INDEX records_retention ON records (seq) WHERE kind = 'retention';
PRAGMA writable_schema=OFF;
COMMIT;
