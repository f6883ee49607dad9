// SPDX-License-Identifier: Apache-2.0
package org.apache.rocketmq.proxy.grpc;

import io.grpc.BindableService;
import io.grpc.ServerInterceptor;
import io.grpc.ServerServiceDefinition;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.epoll.EpollServerSocketChannel;
import io.grpc.netty.shaded.io.netty.channel.nio.NioEventLoopGroup;
import io.grpc.netty.shaded.io.netty.channel.socket.nio.NioServerSocketChannel;
import java.net.InetSocketAddress;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.proxy.config.ConfigurationManager;
import org.apache.rocketmq.proxy.config.ProxyConfig;
import org.apache.rocketmq.proxy.grpc.interceptor.ContextInterceptor;
import org.apache.rocketmq.proxy.grpc.interceptor.GlobalExceptionInterceptor;
import org.apache.rocketmq.proxy.grpc.interceptor.HeaderInterceptor;

/**
 * The 5.x proxy's gRPC server builder for the test servers, listening on 127.0.0.1 instead of
 * every interface: RocketMQ 5.3.3's own builder binds with NettyServerBuilder.forPort and has
 * no setting for the address. Same public surface and settings as the proxy's class (event
 * loops, channel type, inbound size, idle timeout, the proxy's protocol negotiator and
 * interceptors); scripts/rocketmq.sh compiles it ahead of the proxy's jars, and only the
 * proxy's class path, and checks that its signatures still match the jar's.
 */
public class GrpcServerBuilder {
    static final String BIND_ADDRESS = "127.0.0.1";

    protected NettyServerBuilder serverBuilder;
    protected long time = 30;
    protected TimeUnit unit = TimeUnit.SECONDS;

    public static GrpcServerBuilder newBuilder(ThreadPoolExecutor executor, int port) {
        return new GrpcServerBuilder(executor, port);
    }

    protected GrpcServerBuilder(ThreadPoolExecutor executor, int port) {
        ProxyConfig cfg = ConfigurationManager.getProxyConfig();
        serverBuilder = NettyServerBuilder.forAddress(new InetSocketAddress(BIND_ADDRESS, port));
        serverBuilder.protocolNegotiator(new ProxyAndTlsProtocolNegotiator());
        if (cfg.isEnableGrpcEpoll()) {
            serverBuilder.bossEventLoopGroup(new EpollEventLoopGroup(cfg.getGrpcBossLoopNum()))
                .workerEventLoopGroup(new EpollEventLoopGroup(cfg.getGrpcWorkerLoopNum()))
                .channelType(EpollServerSocketChannel.class);
        } else {
            serverBuilder.bossEventLoopGroup(new NioEventLoopGroup(cfg.getGrpcBossLoopNum()))
                .workerEventLoopGroup(new NioEventLoopGroup(cfg.getGrpcWorkerLoopNum()))
                .channelType(NioServerSocketChannel.class);
        }
        serverBuilder.executor(executor);
        serverBuilder.maxInboundMessageSize(cfg.getGrpcMaxInboundMessageSize())
            .maxConnectionIdle(cfg.getGrpcClientIdleTimeMills(), TimeUnit.MILLISECONDS);
    }

    public GrpcServerBuilder shutdownTime(long time, TimeUnit unit) {
        this.time = time;
        this.unit = unit;
        return this;
    }

    public GrpcServerBuilder addService(BindableService service) {
        serverBuilder.addService(service);
        return this;
    }

    public GrpcServerBuilder addService(ServerServiceDefinition service) {
        serverBuilder.addService(service);
        return this;
    }

    public GrpcServerBuilder appendInterceptor(ServerInterceptor interceptor) {
        serverBuilder.intercept(interceptor);
        return this;
    }

    public GrpcServer build() {
        return new GrpcServer(serverBuilder.build(), time, unit);
    }

    public GrpcServerBuilder configInterceptor() {
        serverBuilder.intercept(new GlobalExceptionInterceptor())
            .intercept(new ContextInterceptor())
            .intercept(new HeaderInterceptor());
        return this;
    }
}
