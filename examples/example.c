/* liblb from C: build a consistent-hash ring, route keys, retry elsewhere on failure.
 *
 *   scripts/install.sh /usr/local     # or any prefix
 *   cc example.c $(pkg-config --cflags --libs liblb) -o example && ./example
 */
#include <stdio.h>
#include <string.h>

#include <lb.h>

/* Our own backend records; liblb hands back the tag we chose (here: the array index). */
struct backend {
    const char *address;
    unsigned weight;
};

static const struct backend backends[] = {
    {"10.0.0.1:8080", 1},
    {"10.0.0.2:8080", 1},
    {"10.0.0.3:8080", 2},
};

static int fail(const char *what, lb_result r) {
    fprintf(stderr, "%s: %s (%s)\n", what, lb_result_name(r), lb_result_str(r));
    return 1;
}

int main(void) {
    printf("liblb %s\n", lb_version());

    lb_options *options = NULL;
    lb_result r = lb_options_new(&options);
    if (r != LB_RESULT_OK) return fail("lb_options_new", r);
    r = lb_options_set_str(options, "hash", 4, "sha256", 6);
    if (r != LB_RESULT_OK) return fail("set hash", r);

    lb_node nodes[3];
    for (size_t i = 0; i < 3; i++) {
        nodes[i].id = backends[i].address;
        nodes[i].id_len = strlen(backends[i].address);
        nodes[i].weight = backends[i].weight;
        nodes[i].tag = i;
    }
    lb_balancer *ring = NULL;
    r = lb_balancer_new("ring", 4, options, nodes, 3, &ring);
    lb_options_free(options); /* the balancer keeps its own copy */
    if (r != LB_RESULT_OK) return fail("lb_balancer_new", r);

    /* Route a few users: the tag indexes our array, no string handling needed. */
    const char *users[] = {"alice", "bob", "carol", "dave"};
    for (size_t i = 0; i < 4; i++) {
        uint64_t tag = 0;
        r = lb_balancer_pick(ring, users[i], strlen(users[i]), &tag, NULL, 0, NULL);
        if (r != LB_RESULT_OK) return fail("pick", r);
        printf("%-6s -> %s\n", users[i], backends[tag].address);
    }

    /* The retry order for one key: where to go if the first choice fails. */
    lb_pick tries[3];
    char ids[3 * 32];
    size_t ids_size = 0, count = 0;
    r = lb_balancer_attempts(ring, "alice", 5, tries, 3, ids, sizeof ids, &ids_size, &count);
    if (r != LB_RESULT_OK) return fail("attempts", r);
    printf("alice's retry order:");
    for (size_t i = 0; i < count; i++) printf(" %s", tries[i].id);
    printf("\n");

    /* Errors are specific codes; the balancer is unchanged after any of them. */
    r = lb_balancer_remove(ring, "10.0.0.9:8080", 13);
    printf("removing an unknown node: %s\n", lb_result_name(r));
    r = lb_balancer_pick(ring, NULL, 0, NULL, NULL, 0, NULL);
    printf("picking without a key on a ring: %s\n", lb_result_name(r));

    lb_balancer_free(ring);
    return 0;
}
