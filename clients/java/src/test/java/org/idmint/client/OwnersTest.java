// OwnersTest: which server a strict take asks first, without a server: the owner's while it
// is up, a server not named yet while the owner is none of the named ones, else the failover
// order; a name moves with the server that gives it (a restart on another address).
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class OwnersTest {
    @Test
    void a_take_asks_the_owner_then_the_servers_not_named_yet() {
        Owners owners = new Owners(3);
        assertEquals(Owners.ANY, owners.pick("t", i -> true), "no owner known");
        // Server 0 answers: it is "n0" and the owner is "n2", a name no server gave yet.
        owners.learn("t", 0, new String("n0"), new String("n2"));
        int probe = owners.pick("t", i -> true);
        assertTrue(probe == 1 || probe == 2, "a server not named yet: " + probe);
        assertEquals(2, owners.pick("t", i -> i != 1), "server 1 is down: never asked");
        owners.learn("t", 2, new String("n2"), new String("n2"));
        assertEquals(2, owners.pick("t", i -> true));
        assertEquals(Owners.ANY, owners.pick("t", i -> i != 2), "the owner is down: the failover order");
        owners.forget("t");
        assertEquals(Owners.ANY, owners.pick("t", i -> true), "forgotten");
    }

    @Test
    void a_name_belongs_to_the_server_that_gave_it_last() {
        Owners owners = new Owners(2);
        owners.learn("t", 0, new String("n"), new String("n"));
        assertEquals(0, owners.pick("t", i -> true));
        // The node now answers at server 1's address (equal names, distinct strings).
        owners.learn("t", 1, new String("n"), new String("n"));
        assertEquals(1, owners.pick("t", i -> true));
        assertEquals(1, owners.pick("t", i -> i == 1), "server 0 no longer holds the name");
    }
}
