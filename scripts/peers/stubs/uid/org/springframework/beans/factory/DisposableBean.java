// Stand-in for the container's shutdown callback.
package org.springframework.beans.factory;

public interface DisposableBean {
    void destroy() throws Exception;
}
