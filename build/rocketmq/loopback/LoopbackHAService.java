// SPDX-License-Identifier: Apache-2.0
package outboxrelay.rocketmq;

import java.lang.reflect.Field;
import java.net.InetSocketAddress;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.ha.DefaultHAService;

/**
 * The broker's HA (replication) listener on 127.0.0.1 instead of every interface: RocketMQ
 * 5.3.3 binds it with new InetSocketAddress(haListenPort) and has no setting for its address
 * (bindAddress covers the remoting ports only). scripts/rocketmq.sh compiles this class and
 * registers it through META-INF/service/org.apache.rocketmq.store.ha.HAService, which
 * DefaultMessageStore reads before falling back to DefaultHAService.
 */
public class LoopbackHAService extends DefaultHAService {
    @Override
    public void init(DefaultMessageStore store) throws java.io.IOException {
        super.init(store);
        try {
            Field f = DefaultHAService.AcceptSocketService.class.getDeclaredField("socketAddressListen");
            f.setAccessible(true);
            f.set(acceptSocketService, new InetSocketAddress("127.0.0.1", store.getMessageStoreConfig().getHaListenPort()));
        } catch (ReflectiveOperationException e) {
            throw new java.io.IOException("cannot bind the HA listener to 127.0.0.1", e);
        }
    }
}
