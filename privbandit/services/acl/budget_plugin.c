/* privbandit's per-account publish budget for Mosquitto 2.0 (plugin API v5), issue #32 item 3.
 *
 * The embedded broker's acl.PublishBudget, on Mosquitto: each connection of an account named by a
 * `plugin_opt_budget_<account>` line gets token buckets of bytes and messages; a PUBLISH that does
 * not fit them is refused (MOSQ_EVT_MESSAGE answers MOSQ_ERR_ACL_DENIED: the broker drops it, a
 * QoS 1 one still gets its PUBACK, reason "not authorized" under MQTT 5), so nothing past the budget
 * reaches a subscriber. Mosquitto has no way for a plugin to stop reading a socket, so unlike the
 * embedded broker (which holds the sender back) the refused bytes are still read, then dropped.
 * The account's connections are counted as they first publish: one past `connections` has every
 * PUBLISH refused, so opening connections does not buy budget. Accounts without a line: untouched.
 *
 *   plugin_opt_budget_users bytes_per_s=16777216,burst_bytes=67108864,messages_per_s=1000,burst_messages=10000,connections=64
 *
 * A `plugin_opt_limits_<account>` line (its account must have a budget) also refuses, before it is
 * routed, a PUBLISH whose payload is msgpack past the bounds the parties' unpacker enforces
 * (codec.unpack: a map or list longer than container_items, more than items map entries and list
 * elements in all, each map or list counting one more, more than containers maps and lists, a
 * string over str_bytes, any ext type), which every party would refuse as `over-limit` on arrival:
 * a decoding bomb of 8 MiB costs Mosquitto its reading, not its forwarding, and the subscriber
 * nothing. Such a message spends no budget. A payload that is not msgpack, or is cut short, is left
 * to the parties (they refuse it too); so is everything within the bounds.
 *
 *   plugin_opt_limits_users container_items=4096,items=65536,containers=8192,str_bytes=4096
 *
 * Built by privbandit (services/mosquitto_process.py, build_budget_plugin) with the machine's cc
 * against Mosquitto's headers; loaded by the generated mosquitto.conf (acl.write_broker_config).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mosquitto.h>
#include <mosquitto_broker.h>
#include <mosquitto_plugin.h>

#define OPT_PREFIX "budget_"
#define LIMITS_PREFIX "limits_"
#define LOG_EVERY_S 5.0 /* as the embedded broker's DROP_LOG_S */

struct budget {
	char *account;
	double bytes_per_s, burst_bytes, messages_per_s, burst_messages;
	long connections;
	/* the unpacker's bounds (a limits_ line), or has_limits 0 */
	int has_limits;
	long container_items, items, containers, str_bytes;
};

struct conn {
	const struct mosquitto *client; /* NULL: a free slot */
	const struct budget *budget;
	char *client_id;
	double bytes, messages, at, logged_at;
	uint64_t refused, refused_bytes, over_limit;
	int over_cap; /* one connection too many of its account: every PUBLISH refused */
};

static mosquitto_plugin_id_t *plugin_id;
static struct budget *budgets;
static int n_budgets;
static struct conn *conns;
static size_t n_conns, cap_conns;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const struct budget *budget_of(const char *username)
{
	if(username == NULL) return NULL;
	for(int i = 0; i < n_budgets; i++){
		if(strcmp(budgets[i].account, username) == 0) return &budgets[i];
	}
	return NULL;
}

static void release(struct conn *c)
{
	mosquitto_free(c->client_id);
	memset(c, 0, sizeof(*c));
}

static long live_connections(const struct budget *b)
{
	long n = 0;
	for(size_t i = 0; i < n_conns; i++){
		if(conns[i].client != NULL && conns[i].budget == b && !conns[i].over_cap) n++;
	}
	return n;
}

/* The connection's entry, made on its first PUBLISH (NULL: out of memory). A slot whose client
 * pointer was freed and reused without a DISCONNECT event is recognised by its client id. */
static struct conn *conn_of(const struct mosquitto *client, const struct budget *b)
{
	const char *id = mosquitto_client_id(client);
	struct conn *slot = NULL;
	for(size_t i = 0; i < n_conns; i++){
		if(conns[i].client == client){
			if(conns[i].budget == b && id != NULL && conns[i].client_id != NULL && strcmp(conns[i].client_id, id) == 0){
				return &conns[i];
			}
			release(&conns[i]);
			slot = &conns[i];
			break;
		}
		if(slot == NULL && conns[i].client == NULL) slot = &conns[i];
	}
	if(slot == NULL){
		if(n_conns == cap_conns){
			size_t cap = cap_conns ? 2 * cap_conns : 64;
			struct conn *grown = mosquitto_realloc(conns, cap * sizeof(*conns));
			if(grown == NULL) return NULL;
			memset(grown + cap_conns, 0, (cap - cap_conns) * sizeof(*conns));
			conns = grown;
			cap_conns = cap;
		}
		slot = &conns[n_conns++];
	}
	slot->over_cap = live_connections(b) >= b->connections;
	slot->client = client;
	slot->budget = b;
	slot->client_id = mosquitto_strdup(id ? id : "");
	slot->bytes = b->burst_bytes;
	slot->messages = b->burst_messages;
	slot->at = now_s();
	slot->logged_at = -1e9;
	if(slot->over_cap){
		mosquitto_log_printf(MOSQ_LOG_WARNING, "privbandit budget: %s (%s) is a connection past its account's "
				"%ld: every PUBLISH of it refused", b->account, slot->client_id, b->connections);
	}
	return slot;
}

static uint64_t be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for(int i = 0; i < n; i++) v = (v << 8) | p[i];
	return v;
}

/* Whether a msgpack payload exceeds the bounds of codec.unpack (1: refuse). One pass, no
 * allocation: the open maps and lists are a count of items still to read each, on a stack no
 * deeper than the containers allowed. Items are counted as a container opens, where the unpacker
 * counts them as it closes; for a payload that is whole the totals are the same, and one cut short
 * the parties refuse anyway. A map's entries are counted as sent (the unpacker counts distinct
 * keys: a map with repeated keys is never a party's). Anything that is not msgpack: 0. */
static int over_limits(const struct budget *b, const unsigned char *p, size_t n)
{
	enum { STACK = 8193 };
	static uint64_t left[STACK]; /* per open container: items still to read (a map's entries twice) */
	int depth = 0;
	long items = 0, containers = 0;
	size_t at = 0;
	if(b->containers >= STACK) return 0; /* the stack below could not follow: leave it to the parties */
	do {
		if(at >= n) return 0;
		unsigned char t = p[at++];
		uint64_t len = 0, children = 0;
		int is_container = 0, head = 0;
		if(t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3){
			/* fixint, nil, bool */
		}else if(t <= 0x8f){ len = t & 0x0f; is_container = 2;
		}else if(t <= 0x9f){ len = t & 0x0f; is_container = 1;
		}else if(t <= 0xbf){
			len = t & 0x1f;
			if((long)len > b->str_bytes) return 1;
			if(len > n - at) return 0;
			at += len;
		}else switch(t){
			case 0xc4: case 0xc5: case 0xc6: /* bin 8/16/32: the message's size bounds it */
				head = t == 0xc4 ? 1 : t == 0xc5 ? 2 : 4;
				if((size_t)head > n - at) return 0;
				len = be(p + at, head);
				at += head;
				if(len > n - at) return 0;
				at += len;
				break;
			case 0xca: at += 4; break;
			case 0xcb: at += 8; break;
			case 0xcc: case 0xd0: at += 1; break;
			case 0xcd: case 0xd1: at += 2; break;
			case 0xce: case 0xd2: at += 4; break;
			case 0xcf: case 0xd3: at += 8; break;
			case 0xd9: case 0xda: case 0xdb: /* str 8/16/32 */
				head = t == 0xd9 ? 1 : t == 0xda ? 2 : 4;
				if((size_t)head > n - at) return 0;
				len = be(p + at, head);
				at += head;
				if((long long)len > b->str_bytes) return 1;
				if(len > n - at) return 0;
				at += len;
				break;
			case 0xdc: case 0xdd: head = t == 0xdc ? 2 : 4; is_container = 1; break;
			case 0xde: case 0xdf: head = t == 0xde ? 2 : 4; is_container = 2; break;
			case 0xc7: case 0xc8: case 0xc9: case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
				return 1; /* ext: the unpacker takes none (max_ext_len=0) */
			default: return 0; /* 0xc1: not msgpack */
		}
		if(at > n) return 0;
		if(is_container){
			if(head){
				if((size_t)head > n - at) return 0;
				len = be(p + at, head); at += head;
			}
			if((long long)len > b->container_items) return 1;
			items += (long)len + 1;
			containers++;
			if(items > b->items || containers > b->containers) return 1;
			children = is_container == 2 ? 2 * len : len;
		}
		/* this value is read: one item fewer in its container; then open it, if it has items */
		if(depth > 0) left[depth - 1]--;
		if(children){
			left[depth++] = children;
		}
		while(depth > 0 && left[depth - 1] == 0) depth--;
	} while(depth > 0);
	return 0;
}

/* Token buckets as services/budget.py's PublishBucket (refilled at their rates up to their bursts), but a
 * PUBLISH that does not fit is refused whole and spends nothing: the bucket never goes below zero. */
static int on_message(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_message *ed = event_data;
	(void)event; (void)userdata;
	const struct budget *b = budget_of(mosquitto_client_username(ed->client));
	if(b == NULL) return MOSQ_ERR_SUCCESS;
	struct conn *c = conn_of(ed->client, b);
	if(c == NULL) return MOSQ_ERR_NOMEM;
	double now = now_s(), size = (double)ed->payloadlen + (ed->topic ? (double)strlen(ed->topic) : 0.0);
	double elapsed = now - c->at;
	c->at = now;
	c->bytes += elapsed * b->bytes_per_s;
	if(c->bytes > b->burst_bytes) c->bytes = b->burst_bytes;
	c->messages += elapsed * b->messages_per_s;
	if(c->messages > b->burst_messages) c->messages = b->burst_messages;
	int fits = !c->over_cap && c->bytes >= size && c->messages >= 1.0;
	int bomb = fits && b->has_limits && over_limits(b, ed->payload, (size_t)ed->payloadlen);
	if(fits && !bomb){
		c->bytes -= size;
		c->messages -= 1.0;
		return MOSQ_ERR_SUCCESS;
	}
	c->refused++;
	c->refused_bytes += (uint64_t)size;
	c->over_limit += (uint64_t)bomb;
	if(now - c->logged_at >= LOG_EVERY_S){
		c->logged_at = now;
		mosquitto_log_printf(MOSQ_LOG_WARNING, "privbandit budget: %s (%s) publishes past its account's budget "
				"(%.0f B/s, %.0f messages/s) or the unpacker's limits: %" PRIu64 " messages (%" PRIu64
				" bytes) refused so far, %" PRIu64 " of them over-limit", b->account, c->client_id, b->bytes_per_s,
				b->messages_per_s, c->refused, c->refused_bytes, c->over_limit);
	}
	return MOSQ_ERR_ACL_DENIED;
}

static void log_total(const struct conn *c, const char *when)
{
	if(c->refused){
		mosquitto_log_printf(MOSQ_LOG_NOTICE, "privbandit budget: %s (%s) %s after %" PRIu64 " messages (%" PRIu64
				" bytes) refused, %" PRIu64 " of them over-limit", c->budget->account, c->client_id, when, c->refused,
				c->refused_bytes, c->over_limit);
	}
}

static int on_disconnect(int event, void *event_data, void *userdata)
{
	struct mosquitto_evt_disconnect *ed = event_data;
	(void)event; (void)userdata;
	for(size_t i = 0; i < n_conns; i++){
		if(conns[i].client == ed->client){
			log_total(&conns[i], "disconnected");
			release(&conns[i]);
		}
	}
	return MOSQ_ERR_SUCCESS;
}

/* "bytes_per_s=…,burst_bytes=…,messages_per_s=…,burst_messages=…,connections=…", every field once. */
static int parse_budget(const char *account, const char *value, struct budget *out)
{
	int end = -1;
	if(sscanf(value, "bytes_per_s=%lf,burst_bytes=%lf,messages_per_s=%lf,burst_messages=%lf,connections=%ld%n",
				&out->bytes_per_s, &out->burst_bytes, &out->messages_per_s, &out->burst_messages,
				&out->connections, &end) != 5 || end < 0 || value[end] != '\0'
			|| !(out->bytes_per_s > 0) || !(out->burst_bytes >= 1) || !(out->messages_per_s > 0)
			|| !(out->burst_messages >= 1) || out->connections < 1){
		mosquitto_log_printf(MOSQ_LOG_ERR, "privbandit budget: plugin_opt_" OPT_PREFIX "%s %s: expected "
				"bytes_per_s=R,burst_bytes=N,messages_per_s=R,burst_messages=N,connections=N with rates > 0 "
				"and the rest >= 1", account, value);
		return MOSQ_ERR_INVAL;
	}
	out->account = mosquitto_strdup(account);
	return out->account ? MOSQ_ERR_SUCCESS : MOSQ_ERR_NOMEM;
}

/* "container_items=…,items=…,containers=…,str_bytes=…" for an account with a budget line. */
static int parse_limits(const char *account, const char *value)
{
	struct budget *b = NULL;
	long container_items, items, containers, str_bytes;
	int end = -1;
	for(int i = 0; i < n_budgets; i++){
		if(strcmp(budgets[i].account, account) == 0) b = &budgets[i];
	}
	if(b == NULL){
		mosquitto_log_printf(MOSQ_LOG_ERR, "privbandit budget: plugin_opt_" LIMITS_PREFIX "%s: no plugin_opt_"
				OPT_PREFIX "%s line (the limits apply to an account with a budget)", account, account);
		return MOSQ_ERR_INVAL;
	}
	if(sscanf(value, "container_items=%ld,items=%ld,containers=%ld,str_bytes=%ld%n", &container_items, &items,
				&containers, &str_bytes, &end) != 4 || end < 0 || value[end] != '\0' || container_items < 1
			|| items < 1 || containers < 1 || containers > 8192 || str_bytes < 1){
		mosquitto_log_printf(MOSQ_LOG_ERR, "privbandit budget: plugin_opt_" LIMITS_PREFIX "%s %s: expected "
				"container_items=N,items=N,containers=N,str_bytes=N, each >= 1, containers <= 8192", account, value);
		return MOSQ_ERR_INVAL;
	}
	b->has_limits = 1;
	b->container_items = container_items; b->items = items; b->containers = containers; b->str_bytes = str_bytes;
	mosquitto_log_printf(MOSQ_LOG_NOTICE, "privbandit budget: each PUBLISH of %s past the unpacker's limits "
			"(%ld items a map or list, %ld in all, %ld maps and lists, strings of %ld bytes, no ext) refused",
			account, container_items, items, containers, str_bytes);
	return MOSQ_ERR_SUCCESS;
}

int mosquitto_plugin_version(int supported_version_count, const int *supported_versions)
{
	for(int i = 0; i < supported_version_count; i++){
		if(supported_versions[i] == 5) return 5;
	}
	return -1;
}

int mosquitto_plugin_init(mosquitto_plugin_id_t *identifier, void **userdata, struct mosquitto_opt *options,
		int option_count)
{
	(void)userdata;
	plugin_id = identifier;
	budgets = mosquitto_calloc((size_t)(option_count > 0 ? option_count : 1), sizeof(*budgets));
	if(budgets == NULL) return MOSQ_ERR_NOMEM;
	for(int i = 0; i < option_count; i++){
		if(strncmp(options[i].key, LIMITS_PREFIX, strlen(LIMITS_PREFIX)) == 0) continue; /* below */
		if(strncmp(options[i].key, OPT_PREFIX, strlen(OPT_PREFIX)) != 0 || options[i].key[strlen(OPT_PREFIX)] == '\0'){
			mosquitto_log_printf(MOSQ_LOG_ERR, "privbandit budget: unknown option plugin_opt_%s (expected "
					"plugin_opt_" OPT_PREFIX "<account> or plugin_opt_" LIMITS_PREFIX "<account>)", options[i].key);
			return MOSQ_ERR_INVAL;
		}
		int rc = parse_budget(options[i].key + strlen(OPT_PREFIX), options[i].value, &budgets[n_budgets]);
		if(rc != MOSQ_ERR_SUCCESS) return rc;
		n_budgets++;
	}
	for(int i = 0; i < option_count; i++){
		if(strncmp(options[i].key, LIMITS_PREFIX, strlen(LIMITS_PREFIX)) != 0) continue;
		int rc = parse_limits(options[i].key + strlen(LIMITS_PREFIX), options[i].value);
		if(rc != MOSQ_ERR_SUCCESS) return rc;
	}
	if(n_budgets == 0){
		mosquitto_log_printf(MOSQ_LOG_ERR, "privbandit budget: no plugin_opt_" OPT_PREFIX "<account> line: "
				"nothing to enforce");
		return MOSQ_ERR_INVAL;
	}
	for(int i = 0; i < n_budgets; i++){
		mosquitto_log_printf(MOSQ_LOG_NOTICE, "privbandit budget: each connection of %s: %.0f B/s (burst %.0f), "
				"%.0f messages/s (burst %.0f), at most %ld connections", budgets[i].account, budgets[i].bytes_per_s,
				budgets[i].burst_bytes, budgets[i].messages_per_s, budgets[i].burst_messages, budgets[i].connections);
	}
	int rc = mosquitto_callback_register(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL, NULL);
	if(rc == MOSQ_ERR_SUCCESS) rc = mosquitto_callback_register(plugin_id, MOSQ_EVT_DISCONNECT, on_disconnect, NULL, NULL);
	return rc;
}

int mosquitto_plugin_cleanup(void *userdata, struct mosquitto_opt *options, int option_count)
{
	(void)userdata; (void)options; (void)option_count;
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_MESSAGE, on_message, NULL);
	mosquitto_callback_unregister(plugin_id, MOSQ_EVT_DISCONNECT, on_disconnect, NULL);
	for(size_t i = 0; i < n_conns; i++){
		if(conns[i].client != NULL) log_total(&conns[i], "still connected at shutdown");
		release(&conns[i]);
	}
	mosquitto_free(conns);
	for(int i = 0; i < n_budgets; i++) mosquitto_free(budgets[i].account);
	mosquitto_free(budgets);
	conns = NULL; budgets = NULL; n_conns = cap_conns = 0; n_budgets = 0;
	return MOSQ_ERR_SUCCESS;
}
