/* A tiny JSON reader for liblb's C tests (reads tests/vectors/vectors.json). Strict enough for
 * files written by serde_json: objects, arrays, strings (every escape, including \u surrogate
 * pairs, decoded to UTF-8 with an explicit length, so "\u0000" survives), numbers (as doubles,
 * and integers up to 2^64-1 kept exactly), true, false, null. Everything is freed with json_free. */
#ifndef LB_TEST_JSON_H
#define LB_TEST_JSON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_kind;

typedef struct json {
    json_kind kind;
    int boolean;
    uint64_t integer;   /* JSON_NUMBER: exact when is_integer */
    int is_integer;
    double number;      /* JSON_NUMBER: its value as a double (strtod) */
    char *str;          /* JSON_STRING: decoded bytes, NUL-terminated for convenience */
    size_t len;         /* JSON_STRING: length; JSON_ARRAY/OBJECT: number of items */
    struct json *items; /* JSON_ARRAY/OBJECT: values */
    char **keys;        /* JSON_OBJECT: key of each item */
} json;

typedef struct {
    const char *p, *end;
    const char *error;
} json_parser;

static void json_free(json *v) {
    if (v->kind == JSON_STRING) free(v->str);
    if (v->kind == JSON_ARRAY || v->kind == JSON_OBJECT) {
        for (size_t i = 0; i < v->len; i++) {
            json_free(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    memset(v, 0, sizeof *v);
}

static void json_ws(json_parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
        ps->p++;
}

static int json_fail(json_parser *ps, const char *why) {
    if (!ps->error) ps->error = why;
    return 0;
}

static int json_hex4(json_parser *ps, uint32_t *out) {
    if (ps->end - ps->p < 4) return json_fail(ps, "short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *ps->p++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return json_fail(ps, "bad hex digit");
    }
    *out = v;
    return 1;
}

static size_t json_utf8(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string starting at the opening quote into a malloc'ed buffer. */
static int json_string(json_parser *ps, char **out, size_t *out_len) {
    ps->p++; /* opening quote */
    /* Decoded text is never longer than the source text. */
    const char *q = ps->p;
    while (q < ps->end && *q != '"') q += (*q == '\\') ? 2 : 1;
    if (q >= ps->end) return json_fail(ps, "unterminated string");
    char *buf = malloc((size_t)(q - ps->p) + 1);
    if (!buf) return json_fail(ps, "out of memory");
    size_t n = 0;
    while (*ps->p != '"') {
        char c = *ps->p++;
        if (c != '\\') { buf[n++] = c; continue; }
        char e = *ps->p++;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (!json_hex4(ps, &cp)) { free(buf); return 0; }
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    free(buf);
                    return json_fail(ps, "lone high surrogate");
                }
                ps->p += 2;
                if (!json_hex4(ps, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    free(buf);
                    return json_fail(ps, "bad low surrogate");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            n += json_utf8(cp, buf + n);
            break;
        }
        default: free(buf); return json_fail(ps, "bad escape");
        }
    }
    ps->p++; /* closing quote */
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return 1;
}

static int json_value(json_parser *ps, json *v);

/* Appends a parsed item to an array or object (doubling storage). */
static int json_push(json_parser *ps, json *v, size_t *cap, char *key) {
    if (v->len == *cap) {
        size_t ncap = *cap ? *cap * 2 : 4;
        json *items = realloc(v->items, ncap * sizeof *items);
        if (!items) { free(key); return json_fail(ps, "out of memory"); }
        v->items = items;
        if (v->kind == JSON_OBJECT) {
            char **keys = realloc(v->keys, ncap * sizeof *keys);
            if (!keys) { free(key); return json_fail(ps, "out of memory"); }
            v->keys = keys;
        }
        *cap = ncap;
    }
    memset(&v->items[v->len], 0, sizeof v->items[0]);
    if (v->kind == JSON_OBJECT) v->keys[v->len] = key;
    v->len++;
    return json_value(ps, &v->items[v->len - 1]);
}

static int json_value(json_parser *ps, json *v) {
    json_ws(ps);
    if (ps->p >= ps->end) return json_fail(ps, "unexpected end");
    char c = *ps->p;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        v->kind = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        size_t cap = 0;
        ps->p++;
        json_ws(ps);
        if (ps->p < ps->end && *ps->p == close) { ps->p++; return 1; }
        for (;;) {
            char *key = NULL;
            if (v->kind == JSON_OBJECT) {
                size_t klen;
                json_ws(ps);
                if (ps->p >= ps->end || *ps->p != '"') return json_fail(ps, "expected key");
                if (!json_string(ps, &key, &klen)) return 0;
                json_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') { free(key); return json_fail(ps, "expected :"); }
                ps->p++;
            }
            if (!json_push(ps, v, &cap, key)) return 0;
            json_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
            if (ps->p < ps->end && *ps->p == close) { ps->p++; return 1; }
            return json_fail(ps, "expected , or close");
        }
    }
    if (c == '"') {
        v->kind = JSON_STRING;
        return json_string(ps, &v->str, &v->len);
    }
    if (ps->end - ps->p >= 4 && memcmp(ps->p, "true", 4) == 0) {
        v->kind = JSON_BOOL; v->boolean = 1; ps->p += 4; return 1;
    }
    if (ps->end - ps->p >= 5 && memcmp(ps->p, "false", 5) == 0) {
        v->kind = JSON_BOOL; ps->p += 5; return 1;
    }
    if (ps->end - ps->p >= 4 && memcmp(ps->p, "null", 4) == 0) {
        v->kind = JSON_NULL; ps->p += 4; return 1;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->kind = JSON_NUMBER;
        const char *start = ps->p;
        while (ps->p < ps->end && strchr("+-0123456789.eE", *ps->p)) ps->p++;
        v->is_integer = 1;
        v->integer = 0;
        for (const char *d = start; d < ps->p; d++) {
            if (*d < '0' || *d > '9') { v->is_integer = 0; break; }
            if (v->integer > (UINT64_MAX - (uint64_t)(*d - '0')) / 10) { v->is_integer = 0; break; }
            v->integer = v->integer * 10 + (uint64_t)(*d - '0');
        }
        /* The token is copied: the file's bytes are not NUL-terminated after it. */
        char token[64];
        size_t len = (size_t)(ps->p - start);
        if (len >= sizeof token) return json_fail(ps, "number too long");
        memcpy(token, start, len);
        token[len] = '\0';
        v->number = strtod(token, NULL);
        return 1;
    }
    return json_fail(ps, "unexpected character");
}

/* Reads and parses a whole file; returns 0 and prints why on failure. */
static int json_read_file(const char *path, json *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return 0; }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "%s: read failed\n", path);
        free(text);
        fclose(f);
        return 0;
    }
    fclose(f);
    json_parser ps = {text, text + size, NULL};
    int ok = json_value(&ps, out);
    json_ws(&ps);
    if (ok && ps.p != ps.end) ok = json_fail(&ps, "trailing data");
    if (!ok) {
        fprintf(stderr, "%s: JSON error at byte %ld: %s\n", path, (long)(ps.p - text), ps.error);
        json_free(out);
    }
    free(text);
    return ok;
}

/* The value under `key` in an object, or NULL. */
static const json *json_get(const json *obj, const char *key) {
    if (!obj || obj->kind != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->len; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

#endif
